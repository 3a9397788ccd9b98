"""Incremental randomized smoothing (Ugare et al., ICLR 2024, arXiv 2305.19521): a changed
model (the *child* ``f'``: cast to bfloat16, quantized, pruned, fine-tuned) certified from
its parent's certificate and a small estimate of how often the two disagree under noise.

The bound. The parent ``f`` was certified at level ``alpha_1``: with probability at least
``1 - alpha_1`` over the parent's noise, ``p_A = P(f(x + e) = c_A) >= p_A_lower`` (and, for
the multiclass radius, every other class ``P(f(x + e) = c) <= p_B_upper``). On fresh noise
the child's disagreement ``zeta = P(f(x + e) != f'(x + e))`` is bounded above by the
one-sided Clopper-Pearson bound ``zeta_upper`` of its disagreement count, at level
``alpha_2``. For every class ``c``, ``|P(f'(x + e) = c) - P(f(x + e) = c)| <= zeta``, so

* ``P(f'(x + e) = c_A) >= p_A_lower - zeta_upper`` and
* ``P(f'(x + e) = c) <= min(p_B_upper + zeta_upper, 1 - (p_A_lower - zeta_upper))``,

and the child's radius is Cohen's: ``sigma Phi^-1(p_A_lower - zeta_upper)`` where that bound
exceeds 1/2 (binary), or ``sigma / 2 (Phi^-1(p_A') - Phi^-1(p_B'))`` where ``p_A' > p_B'``
(multiclass); the row abstains otherwise, or where the parent abstained.

Confidence (union bound, no independence needed): the child's claim fails only when the
parent's bound or the disagreement bound fails, so it holds with probability at least
``1 - (alpha_1 + alpha_2)``. With ``fallback=True`` a row the bound cannot certify is
certified from scratch (Cohen's CERTIFY of the child with the parent's ``n0``, ``n`` and
``alpha_1``, on noise of its own); since that noise is independent of the choice to fall
back, a row's claim then fails with probability at most ``alpha_1 + alpha_2 + alpha_1``.
:func:`stated_alpha` is the level every row of a run claims.

Keys. The disagreement samples of input ``idx`` are drawn with
``fold_in(fold_in(fold_in(K, DISAGREEMENT), idx), j)`` and the fallback's passes with
``fold_in(K, FALLBACK)`` as Cohen's key, ``K`` the child's key. ``DISAGREEMENT`` (3) and
``FALLBACK`` (4) differ from the passes of every certify run (selection 0, estimation 1,
auxiliary 2), so even a child key equal to its parent's would draw other noise (Threefry
under one key is a permutation of its input); a child run's key binds its claim, which names
the parent's claim digest, so its key is not its parent's (``rsjax.records.spec``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from rsjax import stats
from rsjax.cohen._recertify_check import stated_alpha
from rsjax.engine import precision as precision_lib
from rsjax.engine.counts import prepare_inputs, refuse_traced, sample_counts
from rsjax.engine.driver import ABSTAIN, Certificate, Sampling
from rsjax.engine.step import cast_floating
from rsjax.noise import Gaussian
from rsjax.runs.method import Certifier, Context
from rsjax.util import as_key

if TYPE_CHECKING:
  from jax.typing import ArrayLike

  from rsjax.cohen._certify import Batch

__all__ = [
  "DISAGREEMENT",
  "FALLBACK",
  "Parent",
  "PairDisagreement",
  "Recertified",
  "Recertify",
  "child_bounds",
  "recertify",
  "stated_alpha",
]

#: ``fold_in(K, DISAGREEMENT)``: the key of the disagreement samples (not 0, 1 or 2, the
#: passes of every certify run).
DISAGREEMENT = 3
#: ``fold_in(K, FALLBACK)``: Cohen's key of the rows certified from scratch (``fallback``).
FALLBACK = 4


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
  """

  apply_fn: Callable
  params: Any
  settings: Sampling
  ids: np.ndarray
  prediction: np.ndarray
  p_lower: np.ndarray
  p_upper: np.ndarray | None = None

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
    return cls(
      apply_fn,
      params,
      settings,
      ids,
      np.asarray(cert.prediction, np.int64),
      np.asarray(cert.p_lower, np.float64),
      upper,
    )

  def rows(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(prediction, p_lower, p_upper)`` of dataset indices ``ids``.

    Raises:
      ValueError: an index the parent did not certify.
    """
    order = np.argsort(self.ids, kind="stable")
    pos = np.searchsorted(self.ids[order], ids)
    pos = np.minimum(pos, len(order) - 1)
    found = self.ids[order][pos] == ids
    if not np.all(found):
      raise ValueError(f"the parent has no row of input {int(ids[~found][0])}")
    at = order[pos]
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


@dataclasses.dataclass(frozen=True)
class Recertified(Certificate):
  """A child's certificate (``rsjax.Certificate``): ``counts`` are the disagreement counts
  ``[B, 2]`` (agree, disagree) of ``n`` samples, ``p_lower`` the child's bound on its
  certified class (of the fallback where it certified a row).

  Attributes:
    zeta: ``[B]`` the upper bound on the disagreement (level ``alpha_2``).
    parent_prediction, parent_p_lower: ``[B]`` the parent's certificate of the rows.
    parent_p_upper: ``[B]`` its bound on every other class (multiclass), or None.
    fallback: ``[B]`` bool, the rows certified from scratch.
    fallback_cert: the fallback's ``Certificate`` of those rows (in order), or None.
  """

  zeta: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
  parent_prediction: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
  parent_p_lower: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
  parent_p_upper: np.ndarray | None = None
  fallback: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, bool))
  fallback_cert: Certificate | None = None

  columns: ClassVar[tuple[str, ...]] = ("zeta", "fallback")

  def row_fields(self, j: int) -> dict:
    return {"zeta": float(self.zeta[j]), "fallback": int(bool(self.fallback[j]))}

  def record_fields(self, j: int) -> dict:
    parent = {"predict": int(self.parent_prediction[j]), "p_lower": float(self.parent_p_lower[j])}
    if self.parent_p_upper is not None:
      parent["p_upper"] = float(self.parent_p_upper[j])
    out: dict = {"zeta": float(self.zeta[j]), "parent": parent}
    if self.fallback[j]:
      assert self.fallback_cert is not None
      k = int(np.count_nonzero(self.fallback[:j]))  # its row in the fallback's certificate
      fb = self.fallback_cert
      out["fallback"] = {
        "counts0": _sparse(fb.counts_selection[k]) if fb.counts_selection is not None else None,
        "counts": _sparse(fb.counts[k]),
        "p_lower": float(fb.p_lower[k]),
      }
    return out


def _sparse(counts: np.ndarray) -> dict:
  c = np.asarray(counts).reshape(-1)
  return {str(k): int(c[k]) for k in np.flatnonzero(c)}


@dataclasses.dataclass(frozen=True)
class Recertify(Certifier):
  """The certifier of a child (``rsjax.certify(..., certifier=Recertify(parent))``, and
  ``--method recertify``'s): the ``apply_fn`` and ``params`` it is called with are the
  child's, ``settings`` the disagreement's (``n`` samples, ``alpha`` = alpha_2, the parent's
  noise, the child's precision).

  Attributes:
    parent: the parent's model and certificate (:class:`Parent`).
    fallback: certify the rows the bound cannot from scratch (module docstring).
    parent_run: the parent's run record (``RunSpec``) where a run names its parent, or None.
    parent_path: the parent's result file there, or None.
  """

  parent: Parent
  fallback: bool = False
  parent_run: Any = dataclasses.field(default=None, compare=False)
  parent_path: str | None = None

  columns: ClassVar[tuple[str, ...]] = Recertified.columns

  @classmethod
  def from_options(cls, ctx: Context, *, fallback: bool = False, **parent: Any) -> Recertify:
    """``--method recertify``: the parent run its options name (``rsjax.cohen._recertify_plan``)."""
    from rsjax.cohen._recertify_plan import load_parent

    run, (cert, apply_fn, params, settings, ids) = load_parent(ctx, **parent)
    p = Parent.of(cert, apply_fn, params, settings, ids=ids, multiclass=run.multiclass)
    return cls(p, bool(fallback), parent_run=run, parent_path=parent["parent"])

  def _alpha(self, ctx: Context) -> float:
    """The row's total alpha the run states (``stated_alpha``)."""
    return stated_alpha(self.parent_run.sampling["alpha"], ctx.settings.alpha, self.fallback)

  def describe(self, ctx: Context) -> str:
    if self.parent_run is None:
      return "recertify"
    a, s = self.parent_run.sampling["alpha"], ctx.settings
    return (
      f"recertify from {self.parent_path} (claim {self.parent_run.claim_digest()[:12]}): "
      f"{s.n} disagreement samples, alpha {a:g} + {s.alpha:g}"
      f"{' + fallback ' + format(a, 'g') if self.fallback else ''} = {self._alpha(ctx):g}"
    )

  def details(self, ctx: Context) -> dict | None:
    return None if self.parent_run is None else {"alpha": self._alpha(ctx)}

  def certify(self, batch: Batch) -> Recertified:
    """The disagreement counts on ``fold_in(key, DISAGREEMENT)``, the child's bound, and
    (``fallback``) Cohen's CERTIFY of the rows it leaves on ``fold_in(key, FALLBACK)``; the
    batch's classifier is the child's."""
    key, apply_fn, params, x, sigma, ids = (
      batch.key, batch.apply_fn, batch.params, batch.x, batch.sigma, batch.ids
    )  # fmt: skip
    num_classes, settings = batch.num_classes, batch.settings
    refuse_traced("rsjax.recertify", key, params, x, sigma, ids)
    ps = self.parent.settings
    if not isinstance(settings.noise, Gaussian) or settings.noise != ps.noise:
      raise ValueError(
        f"recertify needs the parent's Gaussian noise, got {settings.noise.name} "
        f"(the parent's: {ps.noise.name})"
      )
    x_np, sig, ids_arr = prepare_inputs(x, sigma, ids)
    pred, p_lo, p_up = self.parent.rows(ids_arr.astype(np.int64))
    key = as_key(key)
    pair = PairDisagreement(parent_fn=self.parent.apply_fn, child_fn=apply_fn,
                            parent_precision=ps.precision, child_precision=settings.precision)  # fmt: skip
    counts = sample_counts(
      jax.random.fold_in(key, DISAGREEMENT), pair, (self.parent.params, params), x_np,
      sigma=sig, num_classes=2, num=settings.n, batch_size=settings.batch_size, ids=ids_arr,
      noise=settings.noise, precision="float32", devices=settings.devices,
    )  # fmt: skip
    zeta = stats.clopper_pearson_upper(counts[:, 1], settings.n, settings.alpha)
    scale = sig.reshape(len(sig), -1)[:, 0]
    prediction, radius, p_lower = child_bounds(pred, p_lo, p_up, zeta, scale)
    use = np.zeros(len(prediction), bool)
    fb = None
    if self.fallback:
      use = prediction == ABSTAIN
      if np.any(use):
        fb = self._from_scratch(key, apply_fn, params, x_np[use], sig[use], ids_arr[use],
                                num_classes, settings)  # fmt: skip
        prediction[use], radius[use], p_lower[use] = fb.prediction, fb.radius, fb.p_lower
    return Recertified(
      prediction=prediction, radius=np.asarray(radius, np.float64), p_lower=p_lower,
      counts=counts, counts_selection=None, norm="l2", guarantee=self._guarantee(settings),
      zeta=zeta, parent_prediction=pred, parent_p_lower=p_lo, parent_p_upper=p_up,
      fallback=use, fallback_cert=fb,
    )  # fmt: skip

  def _from_scratch(self, key, apply_fn, params, x, sig, ids, num_classes, settings):
    """Cohen's CERTIFY of the child on these rows, with the parent's n0, n and alpha_1."""
    from rsjax.cohen._certify import Batch, Cohen

    ps = self.parent.settings
    s = settings.replace(n0=ps.n0, n=ps.n, alpha=ps.alpha)
    return Cohen(multiclass=self.parent.multiclass).certify(
      Batch(jax.random.fold_in(key, FALLBACK), apply_fn, params, x, sig, num_classes, s, ids)
    )

  def _guarantee(self, settings: Sampling) -> str:
    a1 = self.parent.settings.alpha
    total = stated_alpha(a1, settings.alpha, self.fallback)
    kind = "multiclass" if self.parent.multiclass else "binary"
    return (
      f"{kind} Gaussian L2 radius of the child from the parent's bound (alpha_1 {a1:g}) "
      f"minus the disagreement's Clopper-Pearson upper bound (alpha_2 {settings.alpha:g}): "
      f"each row holds with probability >= 1 - {total:g} (union bound"
      + (", fallback rows certified from scratch at alpha_1)" if self.fallback else ")")
    )


def recertify(
  key: jax.Array | int,
  apply_fn: Callable,
  params: Any,
  x: ArrayLike,
  *,
  parent: Parent,
  sigma: Any,
  num_classes: int,
  settings: Sampling | None = None,
  ids: ArrayLike | None = None,
  fallback: bool = False,
  **sampling: Any,
) -> Recertified:
  """Certifies the child ``apply_fn(params, .)`` from its parent's certificate.

  Args:
    key: the child's ``jax.random.key`` or int seed (the disagreement samples use
      ``fold_in(key, DISAGREEMENT)``: never a pass of a certify run).
    apply_fn, params: the child model.
    x: ``[B, *input_shape]`` inputs, the parent's rows ``ids``.
    parent: the parent's model and certificate (:meth:`Parent.of` of ``rsjax.certify``'s).
    sigma: the parent's noise level.
    num_classes: C.
    settings: the disagreement's ``rsjax.Sampling``: ``n`` samples, ``alpha`` (alpha_2), the
      parent's noise, the child's precision; keywords as ``rsjax.certify``'s override it.
    ids: ``[B]`` dataset indices (default: positions in ``x``).
    fallback: certify the rows the bound cannot from scratch.

  Returns:
    A :class:`Recertified` certificate; each row holds with probability at least
    ``1 - stated_alpha(parent.settings.alpha, settings.alpha, fallback)``.
  """
  from rsjax.cohen._certify import Batch

  settings = Sampling.of(settings, **sampling)
  batch = Batch(key, apply_fn, params, x, sigma, num_classes, settings, ids)
  return Recertify(parent, fallback).certify(batch)
