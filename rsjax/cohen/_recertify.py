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

The gamma switch (the paper's, its Algorithm 3: ``gamma`` 0.99 on CIFAR-10). Where the
parent's ``p_A_lower >= gamma`` the disagreement bound cannot help (``p_A_lower - zeta_upper``
is below what ``n`` samples of the child alone certify), so the row is certified from scratch:
Cohen's CERTIFY of the child with the child's ``n0`` and ``n`` at ``alpha_1 + alpha_2``, on
noise of its own, and no disagreement sample is drawn for it. Each row still holds at
``alpha_1 + alpha_2``: with ``S = {p_A_lower >= gamma}`` (a function of the parent's counts),
``E_p`` the parent's bound failing and the disagreement and from-scratch noises independent of
the parent's, ``P(fail) <= (alpha_1 + alpha_2) P(S) + alpha_2 P(not S) + P(E_p, not S)``. If
the parent's true ``p_A >= gamma``, ``E_p`` (for ``p_A``) implies ``S`` and ``P(E_p, not S) =
0``; if ``p_A < gamma``, ``S`` implies ``E_p`` and ``P(E_p, not S) = P(E_p) - P(S) <= alpha_1
(1 - P(S))``; so ``P(fail) <= alpha_1 + alpha_2`` (multiclass: a failing runner-up bound is a
small count of another class, negatively associated with the small count of ``c_A`` that
``not S`` is, so ``P(E_B, not S) <= P(E_B) P(not S)``). The paper replays the parent's noise
instead (no parent forward pass); that breaks the independence, and it then certifies the
switched rows at ``alpha_1`` only. ``replay`` (``rsjax recertify --replay``,
``rsjax.cohen._recertify_replay``) replays it too, against the parent's stored votes, and
switches on the parent's selection counts instead, which keeps every row at ``alpha_1 +
alpha_2``. The fallback applies to the rows the switch leaves.
:func:`stated_alpha` is the level every row of a run claims.

Keys. The disagreement samples of input ``idx`` are drawn with
``fold_in(fold_in(fold_in(K, DISAGREEMENT), idx), j)``, the fallback's passes with
``fold_in(K, FALLBACK)`` as Cohen's key and the switched rows' with ``fold_in(K, SWITCH)``,
``K`` the child's key. ``DISAGREEMENT`` (3), ``FALLBACK`` (4) and ``SWITCH`` (5) differ
from the passes of every certify run (selection 0, estimation 1, auxiliary 2), so even a
child key equal to its parent's would draw other noise (Threefry under one key is a
permutation of its input); a child run's key binds its claim, which names the parent's claim
digest, so its key is not its parent's (``rsjax.records.spec``). The parent, the child's
bound and the disagreement classifier are ``rsjax.cohen._recertify_parent``'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import jax
import numpy as np

from rsjax import stats
from rsjax.cohen._recertify_check import SWITCHED, check_gamma, replay_switched, stated_alpha
from rsjax.cohen._recertify_parent import PairDisagreement, Parent, child_bounds
from rsjax.cohen._recertify_replay import ParentVotes, sample_votes
from rsjax.engine.counts import prepare_inputs, refuse_traced, sample_counts
from rsjax.engine.driver import ABSTAIN, Certificate, Sampling
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
  "SWITCH",
  "child_bounds",
  "recertify",
  "stated_alpha",
]

#: ``fold_in(K, DISAGREEMENT)``: the key of the disagreement samples (not 0, 1 or 2, the
#: passes of every certify run).
DISAGREEMENT = 3
#: ``fold_in(K, FALLBACK)``: Cohen's key of the rows certified from scratch (``fallback``).
FALLBACK = 4
#: ``fold_in(K, SWITCH)``: Cohen's key of the rows certified from scratch by the gamma switch.
SWITCH = 5


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
    switched: ``[B]`` bool, the rows the gamma switch certified from scratch (no
      disagreement samples: their counts are 0 and ``zeta`` 0).
    switched_cert: the ``Certificate`` of those rows (in order), or None.
  """

  zeta: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
  parent_prediction: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
  parent_p_lower: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
  parent_p_upper: np.ndarray | None = None
  fallback: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, bool))
  fallback_cert: Certificate | None = None
  switched: np.ndarray | None = None
  switched_cert: Certificate | None = None

  columns: ClassVar[tuple[str, ...]] = ("zeta", "fallback")

  def _switched(self, j: int) -> bool:
    return self.switched is not None and bool(self.switched[j])

  def row_fields(self, j: int) -> dict:
    """The TSV's ``fallback``: 1 the ``--fallback`` certified the row from scratch, 2 the
    gamma switch did, 0 the bound did."""
    how = SWITCHED if self._switched(j) else int(bool(self.fallback[j]))
    return {"zeta": float(self.zeta[j]), "fallback": how}

  def record_fields(self, j: int) -> dict:
    parent = {"predict": int(self.parent_prediction[j]), "p_lower": float(self.parent_p_lower[j])}
    if self.parent_p_upper is not None:
      parent["p_upper"] = float(self.parent_p_upper[j])
    out: dict = {"zeta": float(self.zeta[j]), "parent": parent}
    if self.fallback[j]:
      assert self.fallback_cert is not None
      k = int(np.count_nonzero(self.fallback[:j]))  # its row in the fallback's certificate
      out["fallback"] = _scratch_record(self.fallback_cert, k)
    if self._switched(j):
      assert self.switched is not None and self.switched_cert is not None
      k = int(np.count_nonzero(self.switched[:j]))
      out["switched"] = _scratch_record(self.switched_cert, k)
    return out


def _scratch_record(cert: Certificate, k: int) -> dict:
  """The counts and bound of row ``k`` of a from-scratch certificate."""
  c0 = cert.counts_selection
  return {
    "counts0": _sparse(c0[k]) if c0 is not None else None,
    "counts": _sparse(cert.counts[k]),
    "p_lower": float(cert.p_lower[k]),
  }


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
    gamma: the gamma switch: rows whose parent ``p_A_lower >= gamma`` are certified from
      scratch at ``alpha_1 + alpha_2`` with the child's ``n0`` and ``n`` (module docstring);
      None: no switch.
    parent_run: the parent's run record (``RunSpec``) where a run names its parent, or None.
    parent_path: the parent's result file there, or None.
    replay: the parent's stored votes: the bound rows replay the parent's estimation
      samples and the switch reads the parent's selection counts
      (``rsjax.cohen._recertify_replay``); None: fresh noise for both models.
  """

  parent: Parent
  fallback: bool = False
  gamma: float | None = None
  parent_run: Any = dataclasses.field(default=None, compare=False)
  parent_path: str | None = None
  replay: ParentVotes | None = dataclasses.field(default=None, compare=False)

  columns: ClassVar[tuple[str, ...]] = Recertified.columns

  @classmethod
  def from_options(
    cls, ctx: Context, *, fallback: bool = False, gamma: float | None = None,
    replay: str | None = None, **parent: Any,
  ) -> Recertify:  # fmt: skip
    """``--method recertify``: the parent run its options name (``rsjax.cohen._recertify_plan``)."""
    from rsjax.cohen._recertify_plan import load_parent, load_votes

    run, (cert, apply_fn, params, settings, ids) = load_parent(ctx, **parent)
    p = Parent.of(cert, apply_fn, params, settings, ids=ids, multiclass=run.multiclass)
    g = None if gamma is None else check_gamma(gamma)
    votes = None if replay is None else load_votes(run, parent["parent"], replay)
    return cls(p, bool(fallback), g, parent_run=run, parent_path=parent["parent"], replay=votes)

  def _alpha(self, ctx: Context) -> float:
    """The row's total alpha the run states (``stated_alpha``)."""
    return stated_alpha(self.parent_run.sampling.alpha, ctx.settings.alpha, self.fallback)

  def describe(self, ctx: Context) -> str:
    if self.parent_run is None:
      return "recertify"
    a, s = self.parent_run.sampling.alpha, ctx.settings
    return (
      f"recertify from {self.parent_path} (claim {self.parent_run.claim_digest()[:12]}): "
      f"{s.n} disagreement samples, alpha {a:g} + {s.alpha:g}"
      f"{' + fallback ' + format(a, 'g') if self.fallback else ''} = {self._alpha(ctx):g}"
      + ("" if self.replay is None else " on the parent's replayed samples")
      + ("" if self.gamma is None else f"; from scratch where the parent's {self._switch_on} >= "
         f"{self.gamma:g}")
    )  # fmt: skip

  @property
  def _switch_on(self) -> str:
    """What the gamma switch reads of the parent."""
    return "p_A_lower" if self.replay is None else "selection share"

  def details(self, ctx: Context) -> dict | None:
    return None if self.parent_run is None else {"alpha": self._alpha(ctx)}

  def certify(self, batch: Batch) -> Recertified:
    """The gamma switch's rows from scratch on ``fold_in(key, SWITCH)``; the others'
    disagreement counts on ``fold_in(key, DISAGREEMENT)``, the child's bound, and
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
    switched = self.switched_rows(pred, p_lo, ids_arr)
    bound = ~switched
    counts = np.zeros((len(pred), 2), np.int64)
    zeta = np.zeros(len(pred), np.float64)
    if np.any(bound):
      args = (apply_fn, params, x_np[bound], sig[bound], ids_arr[bound], settings)
      if self.replay is None:
        counts[bound] = self._disagreement(key, *args)
      else:
        counts[bound] = self._replayed(*args, num_classes)
      zeta[bound] = stats.clopper_pearson_upper(counts[bound, 1], settings.n, settings.alpha)
    scale = sig.reshape(len(sig), -1)[:, 0]
    prediction, radius, p_lower = child_bounds(pred, p_lo, p_up, zeta, scale)
    sw = None
    if np.any(switched):
      s = settings.replace(alpha=ps.alpha + settings.alpha)
      sw = self._from_scratch(jax.random.fold_in(key, SWITCH), apply_fn, params, x_np[switched],
                              sig[switched], ids_arr[switched], num_classes, s)  # fmt: skip
      prediction[switched], radius[switched], p_lower[switched] = (
        sw.prediction,
        sw.radius,
        sw.p_lower,
      )
    use = np.zeros(len(prediction), bool)
    fb = None
    if self.fallback:
      use = (prediction == ABSTAIN) & bound
      if np.any(use):
        s = settings.replace(n0=ps.n0, n=ps.n, alpha=ps.alpha)
        fb = self._from_scratch(jax.random.fold_in(key, FALLBACK), apply_fn, params, x_np[use],
                                sig[use], ids_arr[use], num_classes, s)  # fmt: skip
        prediction[use], radius[use], p_lower[use] = fb.prediction, fb.radius, fb.p_lower
    return Recertified(
      prediction=prediction, radius=np.asarray(radius, np.float64), p_lower=p_lower,
      counts=counts, counts_selection=None, norm="l2", guarantee=self._guarantee(settings),
      zeta=zeta, parent_prediction=pred, parent_p_lower=p_lo, parent_p_upper=p_up,
      fallback=use, fallback_cert=fb, switched=switched, switched_cert=sw,
    )  # fmt: skip

  def switched_rows(
    self, prediction: np.ndarray, p_lower: np.ndarray, ids: np.ndarray | None = None
  ) -> np.ndarray:
    """``[B]`` bool: the rows the gamma switch certifies from scratch: the parent certified
    them with ``p_A_lower >= gamma`` or, replayed, its selection share of the selected class
    is at least ``gamma`` (rows of dataset indices ``ids``)."""
    if self.gamma is None:
      return np.zeros(len(prediction), bool)
    if self.replay is not None:
      return replay_switched(self.parent.selection_share(np.asarray(ids, np.int64)), self.gamma)
    return (np.asarray(prediction) != ABSTAIN) & (np.asarray(p_lower) >= self.gamma)

  def _replayed(self, apply_fn, params, x, sig, ids, settings, num_classes) -> np.ndarray:
    """``[b, 2]`` counts of ``settings.n`` of the parent's own estimation samples: (the rest,
    the parent voted ``c_A`` and the child did not); one child pass a sample."""
    assert self.replay is not None
    n = settings.n
    classes, parent = self.replay.rows(np.asarray(ids, np.int64), n)
    child = sample_votes(self.replay.key, apply_fn, params, x, sig, ids, classes, num=n,
                         num_classes=num_classes, settings=settings)  # fmt: skip
    d = np.count_nonzero(parent & ~child, axis=1)
    return np.stack([n - d, d], axis=1).astype(np.int64)

  def _disagreement(self, key, apply_fn, params, x, sig, ids, settings) -> np.ndarray:
    """``[b, 2]`` (agree, disagree) counts of ``settings.n`` fresh samples of both models."""
    ps = self.parent.settings
    pair = PairDisagreement(parent_fn=self.parent.apply_fn, child_fn=apply_fn,
                            parent_precision=ps.precision, child_precision=settings.precision)  # fmt: skip
    return sample_counts(
      jax.random.fold_in(key, DISAGREEMENT), pair, (self.parent.params, params), x,
      sigma=sig, num_classes=2, num=settings.n, batch_size=settings.batch_size, ids=ids,
      noise=settings.noise, precision="float32", devices=settings.devices,
    )  # fmt: skip

  def _from_scratch(self, key, apply_fn, params, x, sig, ids, num_classes, settings):
    """Cohen's CERTIFY of the child on these rows under ``settings``, on ``key``."""
    from rsjax.cohen._certify import Batch, Cohen

    return Cohen(multiclass=self.parent.multiclass).certify(
      Batch(key, apply_fn, params, x, sig, num_classes, settings, ids)
    )

  def _guarantee(self, settings: Sampling) -> str:
    a1 = self.parent.settings.alpha
    total = stated_alpha(a1, settings.alpha, self.fallback)
    kind = "multiclass" if self.parent.multiclass else "binary"
    switch = (
      ""
      if self.gamma is None
      else f"; rows whose parent {self._switch_on} >= {self.gamma:g} from scratch at alpha_1 + "
      "alpha_2"
    )
    if self.replay is not None:
      switch = "; the disagreement on the parent's replayed samples" + switch
    return (
      f"{kind} Gaussian L2 radius of the child from the parent's bound (alpha_1 {a1:g}) "
      f"minus the disagreement's Clopper-Pearson upper bound (alpha_2 {settings.alpha:g}): "
      f"each row holds with probability >= 1 - {total:g} (union bound"
      + (", fallback rows certified from scratch at alpha_1" if self.fallback else "")
      + switch
      + ")"
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
  gamma: float | None = None,
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
    gamma: the gamma switch (:class:`Recertify`), e.g. 0.99; None: none.

  Returns:
    A :class:`Recertified` certificate; each row holds with probability at least
    ``1 - stated_alpha(parent.settings.alpha, settings.alpha, fallback)``.
  """
  from rsjax.cohen._certify import Batch

  settings = Sampling.of(settings, **sampling)
  batch = Batch(key, apply_fn, params, x, sigma, num_classes, settings, ids)
  return Recertify(parent, fallback, None if gamma is None else check_gamma(gamma)).certify(batch)
