"""UCAN's noise: fixed patterns, dataset-wise ("universal") (mu, sigma), and their sigma sources.

The sigma sources (``rsjax.noise.sigma``) that ``certify`` takes: :class:`FrozenNoise`
(fixed ``(mu, sigma)``, rate 0: a certificate) and :class:`InputDependentNoise`
(``(mu, sigma)`` computed from the input, rate inf: no certificate).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from rsjax.noise.sigma import SigmaValues
from rsjax.ucan._region import NORM_ORDERS

__all__ = [
  "FrozenNoise",
  "InputDependentNoise",
  "UniversalNoise",
  "pattern_sigma",
  "universal_loss",
]


def _per_input(v, name, x_shape, default=None) -> np.ndarray:
  """float, ``[*input_shape]`` (shared) or ``[B, *input_shape]`` -> ``[B, *input_shape]``."""
  if v is None:
    return np.full(x_shape, default, np.float32)
  arr = np.asarray(jax.device_get(v), np.float32)
  if arr.ndim == 0 or arr.shape == x_shape[1:]:
    return np.broadcast_to(arr, x_shape).copy()
  if arr.shape == x_shape:
    return arr
  raise ValueError(
    f"{name} must be a float, shape [*input_shape]={x_shape[1:]} or "
    f"[B, *input_shape]={x_shape}, got shape {arr.shape}"
  )


def _values(x, mu, sigma, rate: float) -> SigmaValues:
  shape = np.shape(x)
  return SigmaValues(
    sigma=_per_input(sigma, "sigma", shape),
    rate=rate,
    slack=np.zeros(shape[:1], np.float64),
    mu=None if mu is None else _per_input(mu, "mu", shape),
  )


@dataclasses.dataclass(frozen=True, eq=False)
class FrozenNoise:
  """Fixed anisotropic noise ``mu + sigma * eps``: rate 0, so its region is a certificate.

  UCAN's pattern-wise sigma (``lam * pattern_sigma(...)``) and a dataset-wise
  generator frozen after training.

  Attributes:
    sigma: float, ``[*input_shape]`` (shared) or ``[B, *input_shape]`` scales > 0.
    mu: None (0), float, ``[*input_shape]`` or ``[B, *input_shape]`` shift.
  """

  sigma: np.ndarray | float
  mu: np.ndarray | float | None = None

  def evaluate(self, x: ArrayLike) -> SigmaValues:
    """``SigmaValues`` of ``x [B, *input_shape]``: ``sigma``, ``mu`` ``[B, *input_shape]``, rate 0."""
    return _values(x, self.mu, self.sigma, 0.0)


@dataclasses.dataclass(frozen=True, eq=False)
class InputDependentNoise:
  """Noise computed from the input, ``(mu(x), sigma(x)) = fn(x)``: rate inf, NOT a certificate.

  UCAN's certification-wise generator: the classifier deployed at ``x + delta``
  smooths with ``mu(x + delta), sigma(x + delta)``, not with the noise the
  region around ``x`` was computed for, so ``certify`` refuses it unless
  ``allow_unsound=True`` (and then marks the result ``sound=False``).

  Attributes:
    fn: ``fn(x [B, *input_shape]) -> (mu or None, sigma)``, each a float,
      ``[*input_shape]`` or ``[B, *input_shape]``.
  """

  fn: Callable

  def evaluate(self, x: ArrayLike) -> SigmaValues:
    """``SigmaValues`` of ``x [B, *input_shape]``: ``fn(x)`` per input, rate inf."""
    mu, sigma = self.fn(x)
    return _values(x, mu, sigma, math.inf)


def pattern_sigma(
  input_shape: tuple[int, ...], *, pattern: str = "l2", kappa: float = 0.2, iota: float = 0.8
) -> np.ndarray:
  """UCAN's fixed pattern-wise scales ``P(a, b) = kappa * ||(a, b)||_p^2 + iota``.

  ``(a, b)`` are pixel coordinates normalized to ``[-1, 1]`` (centre 0). The
  authors' code divides by ``(SIZE - 1) * 2`` instead, so its coordinates span
  ``[-1/4, 1/4]`` and P barely varies (``[0.80, 0.825]`` for l2); that bug is
  fixed here. The map is shared across channels.

  Args:
    input_shape: ``(H, W)`` or ``(H, W, C)``.
    pattern: ``"l2"``, ``"l1"`` or ``"linf"`` (the p of the coordinate norm).
    kappa: curvature.
    iota: value at the centre.

  Returns:
    float32 ``input_shape`` array of scales (multiply by the base lambda).
  """
  order = NORM_ORDERS.get(pattern)
  if order is None:
    raise ValueError(f"pattern must be one of {sorted(NORM_ORDERS)}, got {pattern!r}")
  shape = tuple(int(s) for s in input_shape)
  if len(shape) not in (2, 3) or min(shape) < 1:
    raise ValueError(f"input_shape must be (H, W) or (H, W, C), got {input_shape!r}")

  def coords(size):
    return np.zeros(1) if size == 1 else np.linspace(-1.0, 1.0, size)

  a, b = np.meshgrid(coords(shape[0]), coords(shape[1]), indexing="ij")
  if order == np.inf:
    r = np.maximum(np.abs(a), np.abs(b))
  else:
    r = (np.abs(a) ** order + np.abs(b) ** order) ** (1.0 / order)
  p = kappa * r**2 + iota
  if not np.all(p > 0):
    raise ValueError(f"kappa={kappa!r}, iota={iota!r} give scales <= 0")
  if len(shape) == 3:
    p = np.repeat(p[:, :, None], shape[2], axis=2)
  return p.astype(np.float32)


@dataclasses.dataclass(frozen=True)
class UniversalNoise:
  """Dataset-wise ("universal") ``(mu, sigma)``: free vectors through tanh.

  ``mu = tanh(a)``, ``sigma = |tanh(b)| * scale``. UCAN's generator is an MLP on
  the constant input 1 whose training-mode BatchNorm makes it a learned constant
  vector, so this is the same family without the MLP (an assumption, see
  METHODS). Certify with the *frozen* values ``noise(params)``.

  Attributes:
    input_shape: shape of one input.
    scale: the factor ``s`` on sigma.
  """

  input_shape: tuple[int, ...]
  scale: float = 1.0

  def init(self, *, mu0: float = 0.0, sigma0: float = 0.5) -> dict:
    """Params giving ``mu = mu0`` and ``sigma = sigma0`` everywhere."""
    if not -1.0 < mu0 < 1.0:
      raise ValueError(f"mu0 must lie in (-1, 1), got {mu0!r}")
    if not 0.0 < sigma0 < self.scale:
      raise ValueError(f"sigma0 must lie in (0, scale={self.scale}), got {sigma0!r}")
    shape = tuple(self.input_shape)
    return {
      "a": jnp.full(shape, np.arctanh(mu0), jnp.float32),
      "b": jnp.full(shape, np.arctanh(sigma0 / self.scale), jnp.float32),
    }

  def __call__(self, params: Any) -> tuple[jax.Array, jax.Array]:
    """Returns ``(mu, sigma)``, each ``input_shape``."""
    return jnp.tanh(params["a"]), jnp.abs(jnp.tanh(params["b"])) * self.scale


def universal_loss(
  logits_fn: Callable,
  x: ArrayLike,
  y: ArrayLike,
  eps: ArrayLike,
  *,
  mu: ArrayLike,
  sigma: ArrayLike,
  weight: float = 5.0,
) -> jax.Array:
  """UCAN's dataset-wise loss ``sum_j CE(f(x + mu + eps_j * sigma), y) - weight * sum_j min|sigma|``.

  Args:
    logits_fn: ``logits_fn(x) -> [B, C]`` logits.
    x: ``[B, *input_shape]`` inputs.
    y: ``[B]`` int labels.
    eps: ``[m, B, *input_shape]`` base noise draws (already scaled by lambda;
      the authors use m = 5).
    mu: ``input_shape`` shift.
    sigma: ``input_shape`` scales.
    weight: the factor on the sigma term (5 in the authors' code).

  Returns:
    Scalar loss (CE averaged over the batch, summed over draws).
  """

  def ce(e):
    logits = logits_fn(x + mu + e * sigma)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=-1))

  return jnp.sum(jax.vmap(ce)(eps)) - weight * eps.shape[0] * jnp.min(jnp.abs(sigma))
