"""Sigma sources: the noise of each input and what a certificate may assume about it.

Every method whose noise is not one fixed float takes a *sigma source*, an
object with ``evaluate(x) -> SigmaValues`` (the :class:`SigmaSource` protocol):

* IDRS designs (``rsjax.idrs.ConstantSigma``, ``KnnSigma``): ``sigma(x)`` per
  input with a semi-elasticity rate;
* DDRS (``rsjax.ddrs.OptimizedSigma``): sigma optimized per input;
* UCAN (``rsjax.ucan.FrozenNoise``, ``InputDependentNoise``; a trained
  generator's ``rsjax.ucan.training.UCANModel.noise_source``): per-dimension
  ``(mu, sigma)``.

The ``rate`` of the values says how the noise may change between an input x and
a perturbed input x + delta, which decides what a radius at x means:

* ``0``: the same noise at every input (a fixed smoothed classifier): Cohen's
  and UCAN's certificates hold.
* finite ``r > 0``: ``|log sigma(x) - log sigma(y)| <= r ||x - y||_2 + slack``
  (IDRS's semi-elasticity): ``rsjax.idrs.certify`` turns it into a sound radius.
* ``inf``: sigma depends on x with no bound (DDRS's optimized sigma, UCAN's
  input-dependent generator): a radius at x is NOT a certificate, because the
  classifier deployed at x + delta smooths with other noise; only DDRS's memory
  (``rsjax.ddrs.certify(memory=...)``) makes a guarantee of it, for one
  deployment run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
  from jax.typing import ArrayLike

__all__ = ["SigmaSource", "SigmaValues"]


class SigmaValues(NamedTuple):
  """The noise of a batch and its envelope (what ``SigmaSource.evaluate`` returns).

  Attributes:
    sigma: ``[B]`` (one scale per input) or ``[B, *input_shape]`` (one per
      dimension) float32 noise scales (sigma0 of the certificate).
    rate: how the noise may change with the input: 0 (constant), finite (IDRS
      semi-elasticity, inflated by float rounding) or inf (unknown: no
      certificate without DDRS's memory); see the module docstring.
    slack: ``[B]`` float64 additive slack s: for every x1 at distance a,
      ``sigma0 e^{-rate a - s} <= sigma(x1) <= sigma0 e^{rate a + s}``.
    mu: None (zero mean) or ``[B, *input_shape]`` float32 shift of the noise
      (UCAN's ``x + mu + sigma * eps``).
  """

  sigma: np.ndarray
  rate: float
  slack: np.ndarray
  mu: np.ndarray | None = None


@runtime_checkable
class SigmaSource(Protocol):
  """Anything with ``evaluate(x [B, *input_shape]) -> SigmaValues``."""

  def evaluate(self, x: ArrayLike) -> SigmaValues: ...
