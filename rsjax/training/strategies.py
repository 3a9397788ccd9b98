"""Data strategies of Sun et al. 2025 ("ACR is a poor metric for RS", seed 003).

Two of the three strategies that amplify Gaussian training change which inputs
an epoch sees (the third, the adaptive sphere attack, changes the noise:
:class:`rsjax.training.objectives.SphereAttack`). Each is switchable alone:

* :class:`Discard` (Section 5.1): at epoch ``E_t`` estimate ``p_A`` of every
  training input as the plain fraction of ``N0 = 100`` sigma-noisy copies the
  current model classifies as the true label (no confidence bound), keep the
  inputs with ``p_A >= p_t``;
* :class:`Reweigh` (Section 5.2): at epochs ``E_t, E_t + 10, ...`` count the
  correct predictions ``C`` among ``N = 16`` noisy copies of each kept input
  and weight it by its approximate certified radius (:func:`reweigh_weights`).

From the first strategy epoch on, every epoch draws ``|D|`` inputs *with
replacement* from the kept set, with probability proportional to the weights
(uniform without :class:`Reweigh`), as the authors' ``WeightedRandomSampler``.

Defaults: CIFAR-10 at sigma = 0.5 (Table 4: E_t = 70 of 150 epochs, p_t = 0.4).
For MNIST the thresholds keep their values (they are probabilities) and
``epoch`` keeps the paper's fraction of training (E_t / epochs = 0.47).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.stats import norm

from rsjax import stats

if TYPE_CHECKING:
  import jax
  from jax.typing import ArrayLike

  from rsjax.engine.step import ApplyFn

__all__ = ["Discard", "Reweigh", "correct_counts", "discard_mask", "resample", "reweigh_weights"]


def _check_epoch(obj):
  stats.check_integral("epoch", obj.epoch, 0)
  stats.check_integral("num_noise", obj.num_noise)


@dataclasses.dataclass(frozen=True)
class Discard:
  """Discard hard inputs at one epoch (Sun et al. 2025, Section 5.1).

  Attributes:
    epoch: E_t, the 0-based epoch at whose start the discard happens (with the
      model after ``epoch`` finished epochs).
    threshold: p_t; inputs with ``p_A >= p_t`` are kept.
    num_noise: N0, noisy copies per input for ``p_A`` (100 in the paper).
  """

  epoch: int = 70
  threshold: float = 0.4
  num_noise: int = 100

  def __post_init__(self):
    _check_epoch(self)
    if not 0 <= self.threshold <= 1:
      raise ValueError(f"threshold must lie in [0, 1], got {self.threshold!r}")

  def due(self, epoch: int) -> bool:
    """Whether the discard happens at the start of ``epoch``."""
    return epoch == self.epoch


@dataclasses.dataclass(frozen=True)
class Reweigh:
  """Reweigh inputs by their approximate certified radius (Sun et al. 2025, Section 5.2).

  Attributes:
    epoch: first 0-based epoch of a reweigh (E_t in the paper).
    every: epochs between reweighs (``dataset_weight_epoch`` = 10).
    num_noise: N, noisy copies per input (16).
    alpha: level of the Clopper-Pearson lower bound (0.1).
    p_min: counts below ``floor(p_min * N)`` are raised to it (0.75).
  """

  epoch: int = 70
  every: int = 10
  num_noise: int = 16
  alpha: float = 0.1
  p_min: float = 0.75

  def __post_init__(self):
    _check_epoch(self)
    stats.check_integral("every", self.every)
    stats.check_alpha(self.alpha)
    if not 0.5 < self.p_min < 1:
      raise ValueError(f"p_min must lie in (0.5, 1), got {self.p_min!r}")

  def due(self, epoch: int) -> bool:
    """Whether the weights are recomputed at the start of ``epoch``."""
    return epoch >= self.epoch and (epoch - self.epoch) % self.every == 0


def correct_counts(
  key: jax.Array | int,
  apply_fn: ApplyFn,
  params: Any,
  x: ArrayLike,
  y: np.ndarray | jax.Array,
  *,
  sigma: ArrayLike,
  num: int,
  num_classes: int,
  batch_size: int = 1000,
  ids: ArrayLike | None = None,
) -> np.ndarray:
  """Number of ``num`` sigma-noisy copies of each input classified as its label.

  Uses the core counts engine (:func:`rsjax.sample_counts`), so the noise of
  input ``ids[i]`` is reproducible.

  Args:
    key: a ``jax.random.key``.
    apply_fn: eval-mode ``apply_fn(params, x) -> logits``.
    params: its parameters.
    x: ``[N, ...]`` inputs; ``y``: ``[N]`` labels.
    sigma: scalar or ``[N]``.
    num: noisy copies per input.
    num_classes: C.
    batch_size: forward passes per step.
    ids: ``[N]`` dataset indices (default positions).

  Returns:
    ``[N]`` int64 counts in ``[0, num]``.
  """
  from rsjax.engine.counts import sample_counts

  counts = sample_counts(
    key,
    apply_fn,
    params,
    x,
    sigma=sigma,
    num_classes=num_classes,
    num=num,
    batch_size=batch_size,
    ids=ids,
  )
  return np.asarray(counts)[np.arange(len(y)), np.asarray(y)].astype(np.int64)


def discard_mask(counts: ArrayLike, num: int, threshold: float) -> np.ndarray:
  """``p_A >= threshold`` with ``p_A = counts / num`` (the authors' plain fraction).

  Args:
    counts: ``[N]`` correct counts out of ``num``.
    num: copies per input.
    threshold: p_t.

  Returns:
    ``[N]`` bool, True for the inputs kept.
  """
  counts = np.asarray(counts)
  if np.any(counts < 0) or np.any(counts > num):
    raise ValueError(f"counts must lie in [0, {num}]")
  return counts / num >= threshold


def reweigh_weights(
  counts: ArrayLike, num: int = 16, *, alpha: float = 0.1, p_min: float = 0.75
) -> np.ndarray:
  """Sampling weights by approximate certified radius, as the authors' code computes them.

  ``C`` is raised to at least ``floor(p_min * num)`` and
  ``w = Phi^-1(LCB(C, num, alpha))`` with the one-sided Clopper-Pearson bound
  ``LCB = Beta.ppf(alpha; C, num - C + 1)``. The paper writes
  ``w = max(1, Phi^-1(p_A) / Phi^-1(p_min))``; since the sampler normalizes
  the weights, the two agree only if ``Phi^-1(p_min)`` means
  ``Phi^-1(LCB(floor(p_min * num), num, alpha))`` (0.1537 for the defaults);
  the code's form is used. Defaults give weights from 0.1537 (C <= 12) to
  1.108 (C = 16), a 7.2x ratio.

  Args:
    counts: ``[N]`` correct counts out of ``num``.
    num: copies per input (16).
    alpha: Clopper-Pearson level (0.1).
    p_min: floor of the fraction (0.75).

  Returns:
    ``[N]`` float64 weights, all > 0.
  """
  counts = np.asarray(counts, np.float64)
  floor = math.floor(p_min * num)
  c = np.maximum(counts, floor)
  w = norm.ppf(stats.clopper_pearson_lower(c, num, alpha))
  if not np.all(w > 0):
    raise ValueError(f"p_min {p_min} with num {num} and alpha {alpha} gives a weight <= 0")
  return w


def resample(key: jax.Array, weights: ArrayLike, num: int) -> np.ndarray:
  """``num`` indices drawn with replacement, with probability proportional to ``weights``.

  Args:
    key: a ``jax.random.key``.
    weights: ``[N]`` nonnegative weights (0 = discarded), not all zero.
    num: draws (the training set size ``|D|`` in Sun et al.).

  Returns:
    ``[num]`` int indices into ``weights``.
  """
  import jax
  import jax.numpy as jnp

  w = np.asarray(weights, np.float64)
  if w.ndim != 1 or np.any(w < 0) or not np.any(w > 0):
    raise ValueError("weights must be a nonnegative [N] array with a positive entry")
  p = jnp.asarray(w / w.sum(), jnp.float32)
  return np.asarray(jax.random.choice(key, w.shape[0], (num,), replace=True, p=p))
