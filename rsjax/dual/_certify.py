"""Dual randomized smoothing (Sun, Mao and Vechev, ICLR 2026, arXiv 2512.01782): a sigma
chosen per input by a smoothed sigma estimator whose choice is certified too.

The parts:

* an estimator ``g``: a classifier over ``K`` sigma indices (``g(x) = k`` means "smooth ``x``
  at ``sigmas[k]``"), smoothed with Gaussian noise of a fixed ``sigma_estimator``:
  ``G(x) = argmax_k P(g(x + d) = k)``, ``d ~ N(0, sigma_estimator^2 I)``;
* a classifier at each sigma, ``f_k`` (one expert per sigma: the routing form; a
  conditioned network is ``K`` pairs, its sigma bound into each ``apply_fn``), smoothed at
  ``sigmas[k]``: ``F_k(x) = argmax_c P(f_k(x + e) = c)``, ``e ~ N(0, sigmas[k]^2 I)``.

The deployed system is ``H(x) = F_{G(x)}(x)``: the smoothed classifier at the sigma the
smoothed estimator chooses.

The certificate of an input ``x`` (what :func:`certify` computes):

1. Cohen's CERTIFY of ``G`` at level ``alpha_1`` (``alpha * alpha_split``): the chosen index
   ``k*`` (selection counts), its lower bound ``pg`` and radius
   ``R_g = sigma_estimator * Phi^-1(pg)``; the estimator abstains (and so does the row)
   unless ``pg > 1/2``.
2. Cohen's CERTIFY of ``F_{k*}`` at level ``alpha_2 = alpha - alpha_1`` on noise independent
   of step 1's: its class ``c``, radius ``R_f``; it may abstain (and so does the row).
3. The row's radius is ``min(R_g, R_f)`` for the class ``c``, at level ``alpha``.

Why it holds (checked here, not only taken from the paper). Let ``A1`` be the event that
step 1's bound holds, ``pg <= P(g(x + d) = k*)``, and ``A2`` the event that step 2's bound
holds for the classifier step 1 chose. Step 1 fails with probability at most ``alpha_1``
(Cohen et al., Theorem 1 with the binary bound). Step 2's noise is drawn independently of
step 1's, so conditionally on any ``k*`` Cohen's CERTIFY of the fixed ``F_{k*}`` fails with
probability at most ``alpha_2``; unconditionally too. So ``P(A1 and A2) >= 1 - alpha`` (union
bound). On ``A1``, ``P(g(x + d) = k*) > 1/2``, so for every ``x'`` with
``||x' - x|| < R_g`` Cohen's theorem gives ``P(g(x' + d) = k*) > 1/2``: ``G(x') = k*``, the
estimator's smoothed choice is constant on the ball (the local constancy the paper's
theorem asks of the sigma). On ``A2``, ``F_{k*}(x') = c`` for ``||x' - x|| < R_f``. So for
``||x' - x|| < min(R_g, R_f)``, ``H(x') = F_{G(x')}(x') = F_{k*}(x') = c``. The claim is about
``H``, the smoothed estimator followed by the smoothed classifier; a deployment that picks
sigma from one noisy draw of ``g``, or from ``g(x)`` unsmoothed, is not the system certified.
The radius is the binary L2 radius of Gaussian noise; the multiclass form is not claimed.

Keys: the estimator's passes use ``fold_in(key, 0)``, the classifiers' ``fold_in(key, 1)``
(each then folded into selection and estimation as ``rsjax.certify`` does), so an input's
noise depends on the key and its id only, as in every rsjax method.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import jax
import numpy as np

from rsjax.claims import split_alpha as exact_split
from rsjax.cohen._certify import certify as cohen_certify
from rsjax.engine.driver import ABSTAIN, Certificate, Sampling
from rsjax.runs.method import Certifier, Context
from rsjax.util import as_key

if TYPE_CHECKING:
  from jax.typing import ArrayLike

__all__ = ["Dual", "DualCertificate", "certify", "check_sigmas", "split_alpha"]

#: The noises whose Cohen radius both halves use (the binary Gaussian L2 radius).
GAUSSIAN_NOISES = ("gaussian", "gaussian_fast")


@dataclasses.dataclass(frozen=True)
class DualCertificate(Certificate):
  """A ``Certificate`` of dual randomized smoothing: the row's class and radius
  ``min(estimator_radius, classifier_radius)`` with both halves' counts.

  ``counts``, ``counts_selection`` and ``p_lower`` are the chosen classifier's (zeros where
  the estimator abstained and no classifier ran).

  Attributes:
    sigma_index: ``[B]`` the estimator's certified choice ``k*``, or -1 (abstain).
    sigma: ``[B]`` ``sigmas[k*]`` (0 where the estimator abstained).
    estimator_radius: ``[B]`` ``R_g``, the radius of the estimator's choice.
    estimator_p_lower: ``[B]`` its lower bound on ``P(g(x + d) = k*)``.
    classifier_radius: ``[B]`` ``R_f``, the radius of the chosen classifier (0 where it or
      the estimator abstained).
    estimator_counts: ``[B, K]`` the estimator's estimation counts.
    estimator_counts_selection: ``[B, K]`` its selection counts.
  """

  sigma_index: np.ndarray | None = None
  sigma: np.ndarray | None = None
  estimator_radius: np.ndarray | None = None
  estimator_p_lower: np.ndarray | None = None
  classifier_radius: np.ndarray | None = None
  estimator_counts: np.ndarray | None = None
  estimator_counts_selection: np.ndarray | None = None

  columns: ClassVar[tuple[str, ...]] = ("sigma", "sigma_index", "estimator_radius")

  def row_fields(self, j: int) -> dict:
    assert self.sigma is not None and self.sigma_index is not None
    assert self.estimator_radius is not None
    return {
      "sigma": repr(float(self.sigma[j])),
      "sigma_index": str(int(self.sigma_index[j])),
      "estimator_radius": repr(float(self.estimator_radius[j])),
    }

  def record_fields(self, j: int) -> dict:
    assert self.estimator_counts is not None and self.estimator_counts_selection is not None
    assert self.sigma_index is not None
    return {
      "sigma_index": int(self.sigma_index[j]),
      "estimator_counts": [int(v) for v in self.estimator_counts[j]],
      "estimator_counts_selection": [int(v) for v in self.estimator_counts_selection[j]],
    }


def split_alpha(alpha: float, alpha_split: float) -> tuple[float, float]:
  """``(alpha_1, alpha_2)``: the estimator's share ``alpha * alpha_split`` and the rest, as
  floats whose exact sum is at most ``alpha`` (``rsjax.claims.split_alpha``)."""
  if not 0.0 < alpha_split < 1.0:
    raise ValueError(f"alpha_split must be in (0, 1), got {alpha_split}")
  return exact_split(alpha, alpha_split)


def check_sigmas(sigmas: Sequence[float]) -> tuple[float, ...]:
  """The sigmas as floats: at least two, each finite and > 0, no two equal."""
  out = tuple(float(s) for s in sigmas)
  if len(out) < 2:
    raise ValueError(f"dual smoothing needs at least two sigmas, got {list(out)}")
  if not all(math.isfinite(s) and s > 0 for s in out) or len(set(out)) != len(out):
    raise ValueError(f"sigmas must be finite, > 0 and distinct, got {list(out)}")
  return out


def certify(
  key: jax.Array | int,
  estimator_apply: Callable,
  estimator_params: Any,
  experts: Sequence[tuple[Callable, Any]],
  x: ArrayLike,
  *,
  sigmas: Sequence[float],
  sigma_estimator: float,
  num_classes: int,
  settings: Sampling | None = None,
  ids: ArrayLike | None = None,
  alpha_split: float = 0.5,
  estimator_n: int | None = None,
  estimator_n0: int | None = None,
  **sampling: Any,
) -> DualCertificate:
  """Dual randomized smoothing's CERTIFY of a batch (the module docstring has the proof).

  Args:
    key: ``jax.random.key`` or int seed (not consumed).
    estimator_apply: ``estimator_apply(params, x) -> [b, K]`` logits over the sigma indices.
    estimator_params: its variables.
    experts: ``K`` pairs ``(apply_fn, params)``, the classifier at each sigma.
    x: ``[B, *input_shape]`` inputs.
    sigmas: the ``K`` sigmas the estimator chooses among.
    sigma_estimator: the Gaussian noise the estimator is smoothed with.
    num_classes: C, the classes of the experts.
    settings: the :class:`rsjax.Sampling` (``alpha`` is the row's total level; Gaussian noise).
    ids: ``[B]`` dataset indices (reproducible noise per input; default ``0..B-1``).
    alpha_split: the estimator's share of ``alpha`` (``alpha_1 = alpha * alpha_split``).
    estimator_n: the estimator's estimation samples (default the settings' ``n``).
    estimator_n0: its selection samples (default the settings' ``n0``).
    **sampling: fields of :class:`rsjax.Sampling` as keywords.

  Returns:
    A :class:`DualCertificate`.

  Raises:
    ValueError: bad arguments (a non-Gaussian noise, ``len(experts) != len(sigmas)``, ...).
  """
  s = Sampling.of(settings, **sampling)
  if s.noise.name not in GAUSSIAN_NOISES:
    raise ValueError(f"dual smoothing certifies Gaussian noise only, not {s.noise.name}")
  sig = check_sigmas(sigmas)
  if len(experts) != len(sig):
    raise ValueError(f"{len(experts)} experts for {len(sig)} sigmas")
  if not (math.isfinite(sigma_estimator) and sigma_estimator > 0):
    raise ValueError(f"sigma_estimator must be > 0, got {sigma_estimator}")
  a1, a2 = split_alpha(s.alpha, alpha_split)
  x = np.asarray(x)
  b = x.shape[0]
  ids_arr = np.arange(b, dtype=np.int64) if ids is None else np.asarray(ids, dtype=np.int64)
  root = as_key(key)
  g = cohen_certify(
    jax.random.fold_in(root, 0),
    estimator_apply,
    estimator_params,
    x,
    sigma=float(sigma_estimator),
    num_classes=len(sig),
    settings=s.replace(alpha=a1, n=estimator_n or s.n, n0=estimator_n0 or s.n0),
    ids=ids_arr,
  )
  chosen = np.where(g.p_lower > 0.5, g.prediction, ABSTAIN).astype(np.int64)
  r_g = np.where(chosen >= 0, g.radius, 0.0)
  pred, r_f, p_f, counts, counts0 = _classify(
    jax.random.fold_in(root, 1), experts, sig, x, ids_arr, chosen, num_classes, s.replace(alpha=a2)
  )
  ok = pred >= 0
  return DualCertificate(
    prediction=pred,
    radius=np.where(ok, np.minimum(r_g, r_f), 0.0),
    p_lower=p_f,
    counts=counts,
    counts_selection=counts0,
    norm="l2",
    guarantee=(
      f"dual randomized smoothing: binary Gaussian L2, min of the estimator's radius "
      f"(alpha {a1:g}) and the chosen classifier's (alpha {a2:g}), union bound"
    ),
    sigma_index=chosen,
    sigma=np.where(chosen >= 0, np.asarray(sig)[np.maximum(chosen, 0)], 0.0),
    estimator_radius=r_g,
    estimator_p_lower=np.asarray(g.p_lower, np.float64),
    classifier_radius=np.where(ok, r_f, 0.0),
    estimator_counts=np.asarray(g.counts, np.int64),
    estimator_counts_selection=np.asarray(g.counts_selection, np.int64),
  )


def _classify(
  key: jax.Array,
  experts: Sequence[tuple[Callable, Any]],
  sigmas: tuple[float, ...],
  x: np.ndarray,
  ids: np.ndarray,
  chosen: np.ndarray,
  num_classes: int,
  settings: Sampling,
) -> tuple[np.ndarray, ...]:
  """Cohen's CERTIFY of each row by the expert the estimator chose (none where it abstained):
  ``(prediction, radius, p_lower, counts, counts_selection)``."""
  b = x.shape[0]
  pred = np.full(b, ABSTAIN, np.int64)
  r_f, p_f = np.zeros(b), np.zeros(b)
  counts, counts0 = np.zeros((b, num_classes), np.int64), np.zeros((b, num_classes), np.int64)
  for k, (apply_fn, params) in enumerate(experts):
    rows = np.flatnonzero(chosen == k)
    if rows.size == 0:
      continue
    f = cohen_certify(
      key,
      apply_fn,
      params,
      x[rows],
      sigma=sigmas[k],
      num_classes=num_classes,
      settings=settings,
      ids=ids[rows],
    )
    assert f.counts_selection is not None  # Cohen's CERTIFY keeps its selection counts
    pred[rows], r_f[rows], p_f[rows] = f.prediction, f.radius, f.p_lower
    counts[rows], counts0[rows] = f.counts, f.counts_selection
  return pred, r_f, p_f, counts, counts0


def _open_expert(where: str) -> tuple[tuple[Any, Any], dict, int]:
  """``((apply_fn, params), {fingerprint, config}, classes)`` of an expert's model directory."""
  from rsjax import models
  from rsjax.records.canonical import model_config_digest
  from rsjax.runs.runner import fingerprint

  try:
    model, config = models.load_model(where)
  except (FileNotFoundError, ValueError) as e:
    raise ValueError(f"--dual-experts: no usable model in {where!r}: {e}") from None
  apply_fn, params = models.to_apply_fn(model)
  facts = {"fingerprint": fingerprint(params), "config": model_config_digest(config)}
  return (apply_fn, params), facts, int(config["num_classes"])


def _expert_text(facts: Sequence[dict]) -> str:
  """``dual_expert_models`` of the experts' facts: ``FP:CONFIG,FP:CONFIG``."""
  return ",".join(f"{f['fingerprint']}:{f['config']}" for f in facts)


def bind(options: dict) -> dict:
  """``Method.bind`` of ``--method dual``: the options with ``dual_expert_models``, each
  expert's fingerprint and configuration digest from the directories ``dual_experts`` names,
  filled in before any noise is drawn, so the claim (and the key) binds the experts, not
  only their paths.

  Raises:
    ValueError: an expert that cannot be loaded, or a ``dual_expert_models`` given that is
      not the experts'.
  """
  from rsjax.dual.method import parse_experts

  if options.get("dual_experts") is None:
    return options
  facts = [_open_expert(where)[1] for _, where in parse_experts(options["dual_experts"])]
  text = _expert_text(facts)
  given = options.get("dual_expert_models")
  if given is not None and given != text:
    raise ValueError(f"--dual-expert-models {given!r} are not the experts' ({text})")
  return {**options, "dual_expert_models": text}


def _load_expert(where: str, ctx: Context) -> tuple[tuple[Any, Any], dict]:
  """``((apply_fn, params), {fingerprint, config})`` of an expert's model directory."""
  expert, facts, classes = _open_expert(where)
  ds = ctx.dataset
  if classes != int(ds.num_classes):
    raise ValueError(f"--dual-experts: {where!r} has {classes} classes, the data {ds.num_classes}")
  return expert, facts


def _check_bound(facts: Sequence[dict], pairs: Sequence, bound: str | None) -> None:
  """Raises ``ValueError`` unless the experts loaded are the ones the claim binds
  (``dual_expert_models``; None: a certifier built without a claim, in a library)."""
  if bound is None or _expert_text(facts) == bound:
    return
  for (_, where), f, want in zip(pairs, facts, bound.split(","), strict=False):
    if f"{f['fingerprint']}:{f['config']}" != want:
      raise ValueError(
        f"--dual-experts: the model in {where!r} (fingerprint {f['fingerprint']}) is not "
        f"the expert the run's claim binds ({want}): another model under the same name"
      )
  raise ValueError(f"--dual-experts: the claim binds {bound!r}, the experts are not those")


@dataclasses.dataclass(frozen=True)
class Dual(Certifier):
  """Dual randomized smoothing as a certifier of ``rsjax.certify`` and of ``--method dual``
  (``rsjax.dual.METHOD``): the batch's classifier is the estimator (its ``K`` logits the
  sigma indices), smoothed at the batch's sigma; :func:`certify` does the rest.

  Attributes:
    experts: ``K`` pairs ``(apply_fn, params)``, the classifier at each sigma.
    sigmas: the ``K`` sigmas the estimator chooses among.
    alpha_split, estimator_n, estimator_n0: as :func:`certify`.
    facts: each expert's ``{fingerprint, config}`` for the run record (``--dual-experts``).
  """

  experts: tuple[tuple[Any, Any], ...]
  sigmas: tuple[float, ...]
  alpha_split: float = 0.5
  estimator_n: int | None = None
  estimator_n0: int | None = None
  facts: tuple[dict, ...] = dataclasses.field(default=(), compare=False)

  columns: ClassVar[tuple[str, ...]] = DualCertificate.columns

  @classmethod
  def from_options(
    cls,
    ctx: Context,
    *,
    dual_experts: str | None,
    dual_alpha_split: float,
    dual_estimator_n: int | None,
    dual_estimator_n0: int | None,
    dual_expert_models: str | None = None,
  ) -> Dual:
    import jax.numpy as jnp

    from rsjax.dual.method import parse_experts

    if dual_experts is None:
      raise ValueError("--method dual needs --dual-experts SIGMA:MODEL_DIR,SIGMA:MODEL_DIR,...")
    pairs = parse_experts(dual_experts)
    split_alpha(ctx.settings.alpha, dual_alpha_split)
    for name, v in (("n", dual_estimator_n), ("n0", dual_estimator_n0)):
      if v is not None and v < 1:
        raise ValueError(f"--dual-estimator-{name} must be >= 1, got {v}")
    shape = tuple(ctx.dataset.input_shape)
    logits = ctx.apply_fn(ctx.params, jnp.zeros((1, *shape), jnp.float32))
    if logits.shape[-1] != len(pairs):
      raise ValueError(
        f"the estimator (the model) has {logits.shape[-1]} outputs, --dual-experts "
        f"{len(pairs)} sigmas"
      )
    loaded = [_load_expert(where, ctx) for _, where in pairs]
    experts, facts = tuple(e for e, _ in loaded), tuple(f for _, f in loaded)
    _check_bound(facts, pairs, dual_expert_models)
    sigmas = tuple(s for s, _ in pairs)
    return cls(experts, sigmas, dual_alpha_split, dual_estimator_n, dual_estimator_n0, facts)

  def describe(self, ctx: Context) -> str:
    a1, a2 = split_alpha(ctx.settings.alpha, self.alpha_split)
    return (
      f"dual randomized smoothing: estimator at sigma={ctx.sigma} (alpha {a1:g}), "
      f"experts at sigmas {list(self.sigmas)} (alpha {a2:g})"
    )

  def details(self, ctx: Context) -> dict:
    return {
      "sigmas": list(self.sigmas),
      "alphas": list(split_alpha(ctx.settings.alpha, self.alpha_split)),
      "experts": [{"sigma": s, **f} for s, f in zip(self.sigmas, self.facts, strict=True)],
    }

  def certify(self, batch: Any) -> DualCertificate:
    return certify(
      batch.key,
      batch.apply_fn,
      batch.params,
      self.experts,
      batch.x,
      sigmas=self.sigmas,
      sigma_estimator=batch.sigma,
      num_classes=batch.num_classes,
      settings=batch.settings,
      ids=batch.ids,
      alpha_split=self.alpha_split,
      estimator_n=self.estimator_n,
      estimator_n0=self.estimator_n0,
    )
