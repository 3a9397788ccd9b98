"""The parent of a child run (``rsjax.cohen._recertify``): its model and certificate
(:class:`Parent`), the child's bound from the parent's bounds and the disagreement
(:func:`child_bounds`), and the classifier whose counts are the disagreement
(:class:`PairDisagreement`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from rsjax import stats
from rsjax.engine import precision as precision_lib
from rsjax.engine.driver import ABSTAIN, Certificate, Sampling
from rsjax.engine.step import cast_floating

if TYPE_CHECKING:
  from jax.typing import ArrayLike

__all__ = ["PairDisagreement", "Parent", "child_bounds", "row_positions"]


def row_positions(known: np.ndarray, ids: np.ndarray) -> np.ndarray:
  """The positions of dataset indices ``ids`` among a parent's rows ``known``.

  Raises:
    ValueError: an index the parent has no row of.
  """
  order = np.argsort(known, kind="stable")
  pos = np.minimum(np.searchsorted(known[order], ids), len(order) - 1)
  found = known[order][pos] == ids
  if not np.all(found):
    raise ValueError(f"the parent has no row of input {int(np.asarray(ids)[~found][0])}")
  return order[pos]


@dataclasses.dataclass(frozen=True)
class Parent:
  """The parent's model and its certificate of the inputs, by dataset index.

  Attributes:
    apply_fn: the parent's ``apply_fn(params, x) -> logits``.
    params: its variables.
    settings: the parent run's ``rsjax.Sampling`` (its ``n0``, ``n``, ``alpha`` (alpha_1),
      noise and precision).
    ids: ``[M]`` the dataset indices of its rows.
    prediction: ``[M]`` its certified class per row (-1: abstained).
    p_lower: ``[M]`` its lower bound on the certified class's probability.
    p_upper: ``[M]`` its upper bound on every other class (multiclass), or None (binary).
    share: ``[M]`` its selection pass's share of the selected class (``counts0[c_A] / n0``),
      or None where its certificate holds no selection counts.
  """

  apply_fn: Callable
  params: Any
  settings: Sampling
  ids: np.ndarray
  prediction: np.ndarray
  p_lower: np.ndarray
  p_upper: np.ndarray | None = None
  share: np.ndarray | None = None

  @property
  def multiclass(self) -> bool:
    return self.p_upper is not None

  @classmethod
  def of(
    cls,
    cert: Certificate,
    apply_fn: Callable,
    params: Any,
    settings: Sampling,
    *,
    ids: ArrayLike | None = None,
    multiclass: bool = False,
  ) -> Parent:
    """The parent of ``rsjax.certify``'s certificate ``cert`` (of inputs ``ids``, default
    their positions) under ``settings``; ``multiclass`` as it was certified."""
    ids = np.arange(len(cert)) if ids is None else np.asarray(ids, np.int64)
    upper = None
    if multiclass:
      counts = np.asarray(cert.counts, np.int64)
      guess = np.asarray(cert.counts_selection).argmax(axis=1)
      b = counts.shape[0]
      others = counts[np.arange(counts.shape[1]) != guess[:, None]].reshape(b, -1)
      _, upper = stats.multiclass_bounds(
        counts[np.arange(len(guess)), guess], others, settings.n, settings.alpha
      )
      upper = np.where(cert.prediction == ABSTAIN, 1.0, upper)
    share = None
    if cert.counts_selection is not None:
      c0 = np.asarray(cert.counts_selection, np.int64)
      share = c0.max(axis=1) / np.maximum(c0.sum(axis=1), 1)
    return cls(
      apply_fn,
      params,
      settings,
      ids,
      np.asarray(cert.prediction, np.int64),
      np.asarray(cert.p_lower, np.float64),
      upper,
      share,
    )

  def selection_share(self, ids: np.ndarray) -> np.ndarray:
    """``[b]`` the selection share of the selected class of dataset indices ``ids``."""
    if self.share is None:
      raise ValueError("the parent's certificate holds no selection counts")
    return self.share[row_positions(self.ids, np.asarray(ids, np.int64))]

  def rows(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(prediction, p_lower, p_upper)`` of dataset indices ``ids``.

    Raises:
      ValueError: an index the parent did not certify.
    """
    at = row_positions(self.ids, ids)
    upper = None if self.p_upper is None else self.p_upper[at]
    return self.prediction[at], self.p_lower[at], upper


def child_bounds(
  prediction: np.ndarray,
  p_lower: np.ndarray,
  p_upper: np.ndarray | None,
  zeta: np.ndarray,
  sigma: ArrayLike,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The child's ``(prediction, radius, p_lower)`` from the parent's bounds and the
  disagreement bound ``zeta`` (module docstring); -1 and radius 0 where it cannot certify."""
  pa = np.asarray(p_lower, np.float64) - np.asarray(zeta, np.float64)
  if p_upper is None:
    ok = (prediction != ABSTAIN) & (pa > 0.5)
    radius = np.where(ok, stats.gaussian_radius(np.clip(pa, 0.0, 1.0), sigma), 0.0)
  else:
    pb = np.minimum(np.asarray(p_upper, np.float64) + zeta, 1.0 - pa)
    ok = (prediction != ABSTAIN) & (pa > pb) & (pa > 0.0)
    radius = np.where(ok, stats.multiclass_radius(np.clip(pa, 0.0, 1.0), pb, sigma), 0.0)
  return np.where(ok, prediction, ABSTAIN).astype(np.int64), radius, np.maximum(pa, 0.0)


@dataclasses.dataclass(frozen=True)
class PairDisagreement:
  """``apply_fn((parent_params, child_params), x) -> [b, 2]``: one-hot of agree (0) or
  disagree (1) of the two models' top classes, each computed at its own precision
  (casts and matmul precision as ``rsjax.engine.precision`` declares them); NaN where either
  model's logits are not finite, so the engine refuses the counts."""

  parent_fn: Callable
  child_fn: Callable
  parent_precision: str = "float32"
  child_precision: str = "float32"

  def _top(self, fn: Callable, params: Any, x: jax.Array, precision: str) -> tuple:
    dtype = precision_lib.compute_dtype(precision)
    with precision_lib.context(precision):
      xs = x if dtype is None else x.astype(dtype)
      logits = fn(cast_floating(params, dtype), xs)
    return jnp.argmax(logits, axis=-1), jnp.all(jnp.isfinite(logits), axis=-1)

  def __call__(self, params: tuple, x: jax.Array) -> jax.Array:
    a, ok_a = self._top(self.parent_fn, params[0], x, self.parent_precision)
    b, ok_b = self._top(self.child_fn, params[1], x, self.child_precision)
    onehot = jax.nn.one_hot((a != b).astype(jnp.int32), 2, dtype=jnp.float32)
    return jnp.where((ok_a & ok_b)[:, None], onehot, jnp.nan)
