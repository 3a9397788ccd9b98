"""Budgeted CERTIFY: sound early stopping for a radius grid.

Cohen et al.'s CERTIFY spends ``n`` samples on every input, although most
inputs are decided long before: a clean input clears the largest radius of a
paper's table after a few thousand samples, a hopeless one shows
``p_A < 1/2`` after a few hundred. ``rsjax.certify(...,
budget=Budget(grid=...))`` samples in rounds and stops each input as soon as
its certified *grid* radius can no longer change, up to ``n_max`` samples.

**The bound: a fixed grid of looks with the error split between them.** The
estimation samples of an input are looked at only after ``n_1 < n_2 < ... <
n_K = n_max`` of them (:meth:`Budget.looks`; fixed before any sample is drawn,
a function of ``n_max`` and the budget only). Look ``k`` gets the one-sided
Clopper-Pearson lower bound ``LB_k`` of the top-class count at level
``alpha_k`` with ``sum_k alpha_k = alpha`` (:meth:`Budget.alphas`). An input
that stops at look ``tau`` (any rule, however data-dependent) reports
``LB_tau``; then::

  P(LB_tau > p_A) <= P(exists k: LB_k > p_A) <= sum_k P(LB_k > p_A) <= sum_k alpha_k = alpha

(the union bound; each ``LB_k`` is an exact level-``alpha_k`` bound for the
fixed sample size ``n_k`` of i.i.d. Bernoulli(p_A) draws). So the certificate
holds with probability at least ``1 - alpha`` per input, exactly as CERTIFY's,
and the rule may stop on whatever it sees. This is the "alpha spending" of
group-sequential tests (Pocock 1977, "Group sequential methods in the design
and analysis of clinical trials", Biometrika 64(2); Lan and DeMets 1983) with
Clopper-Pearson intervals (Clopper and Pearson 1934). It was chosen over an
anytime-valid confidence sequence (Robbins 1970 mixtures; Waudby-Smith and
Ramdas 2023, "Estimating means of bounded random variables by betting") because
with a handful of geometric looks it loses only ``log(K)`` in the exponent,
and at ``n_max`` it gives nearly CERTIFY's bound (half of ``alpha`` is kept for
the last look by default), which an anytime sequence does not.

**The stopping rule** (never needed for soundness, only for efficiency): with
``level(p)`` the index of the largest grid radius ``<= radius(p)`` (``-1``:
abstain, ``p < 1/2``), an input stops at look ``k`` when ``level(LB_k)``
already equals the highest level it could still end at: the smaller of
``level(UB_k)`` (``UB_k`` the Clopper-Pearson upper bound at level
``stop_alpha``: ``p_A`` itself is below the next level) and the level of the
best bound a later look ``j`` could give with a plausible best count: ``p_A``
at ``UB_k`` and the ``n_j - n_k`` new samples at the upper ``stop_alpha``
quantile of ``Binomial(n_j - n_k, UB_k)`` (even if ``p_A`` is above the next
level, ``n_max`` samples are too few to show it). This covers "clears the
largest grid radius", "cannot reach the next level", "cannot reach it within
``n_max``" and "abstain is certain". The decision at a look is one pure function
of the count there (``rsjax.claims.looks_decision``), which ``rsjax verify``
applies to a row's recorded counts at the look it stopped at.

What stopping can cost: say look ``k`` stops an input, and the last look
``n_max`` would certify a higher level on the same samples. Then ``p_A >
UB_k`` (probability ``<= stop_alpha``), or the ``n_max - n_k`` new samples
exceed their ``stop_alpha`` quantile at ``UB_k >= p_A`` (probability ``<=
stop_alpha``: ``Binomial(d, p)`` is stochastically increasing in ``p``, and the
new samples are independent of the old), or, under the ``UB_k`` test,
``LB_K > p_A`` (probability ``<= alpha_K``). Over the looks, an input ends
below the level of its own ``n_max`` samples with probability at most
``2 (K - 1) stop_alpha + alpha_K``, and far less in practice. The plain "all
remaining samples succeed" test is the special case with quantile
``n_j - n_k``, which never errs. The quantile matters where ``p_A`` sits just
above a level: without it, such inputs run to ``n_max`` (more than 10% of the
inputs on the MNIST benchmark at sigma 0.5).

**Reproducible rounds.** Sample ``j`` of input ``i`` is drawn from
``fold_in(fold_in(k_est, ids[i]), j)`` with the same ``k_est = fold_in(key, 1)``
as :func:`rsjax.certify`, so a later round continues the same stream, the counts
at ``n_k`` equal ``rsjax.sample_counts(k_est, ..., num=n_k)`` and an input that
runs to ``n_max`` has exactly fixed-N CERTIFY's counts. The selection pass
(``n0`` samples, ``fold_in(key, 0)``) stays separate, as in CERTIFY.

**Shared launches.** Inputs stop independently, but each round is one list of
``(input, sample range)`` work items over the inputs still running, spread over
the local devices and launched in a few fixed-size scans, so the device stays
busy and wall time falls with the samples used (``rsjax.engine.rounds``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import ClassVar

import jax
import numpy as np
from jax.typing import ArrayLike

from rsjax import noise as noise_lib
from rsjax import stats
from rsjax.claims import budget_alphas, budget_looks, looks_decision, radius_level
from rsjax.engine.anytime_table import run_looks
from rsjax.engine.cohen_rule import CohenRule
from rsjax.engine.counts import resolve_counts
from rsjax.engine.driver import (
  ABSTAIN,
  ESTIMATION,
  SELECTION,
  Certificate,
  CountsFn,
  EngineCounts,
  RuleFn,
  Sampling,
)
from rsjax.engine.rounds import CountFn, round_counter

__all__ = ["Budget", "BudgetedCertificate", "as_budget", "sequential_bounds", "grid_level"]


@dataclasses.dataclass(frozen=True)
class Budget:
  """How budgeted CERTIFY looks at its samples, and its sampling rule.

  A ``Budget`` is an ``rsjax.engine.driver.SamplingRule``: the driver runs it
  (:meth:`run`) in place of the fixed ``n0`` and ``n`` of CERTIFY.

  Attributes:
    grid: the radii whose certified accuracy matters, ascending, >= 0 (0 is
      added when missing). An input stops once its certified grid radius can
      no longer change.
    first: samples at the first look.
    ratio: growth of the looks, ``n_{k+1} = ceil(ratio * n_k)`` (the last one
      is ``n_max``).
    final_share: the share of ``alpha`` kept for the last look ``n_max``; the
      rest is split evenly over the earlier looks.
    stop_alpha: level of the "cannot reach the next level" tests (the
      Clopper-Pearson upper bound of ``p_A`` and the binomial quantile of the
      samples still to come). It only decides when to stop (the guarantee does
      not depend on it); a larger value stops earlier and, with probability up
      to ``2 stop_alpha`` per look, one level below what ``n_max`` samples
      would have certified.
  """

  grid: tuple[float, ...]
  first: int = 1000
  ratio: float = 2.0
  final_share: float = 0.5
  stop_alpha: float = 0.001

  def __post_init__(self) -> None:
    object.__setattr__(self, "grid", radius_grid(self.grid))
    check_looks(self.first, self.ratio)
    if not 0.0 < float(self.final_share) <= 1.0:
      raise ValueError(f"final_share must lie in (0, 1], got {self.final_share!r}")
    stats.check_alpha(self.stop_alpha)

  def looks(self, n_max: int) -> np.ndarray:
    """The sample counts ``n_1 < ... < n_K = n_max`` at which bounds are computed: ``[K]`` int64."""
    return np.asarray(budget_looks(int(n_max), self.first, self.ratio), dtype=np.int64)

  def alphas(self, alpha: float, n_max: int) -> np.ndarray:
    """The level ``alpha_k`` of each look: ``[K]`` float64 summing to ``alpha``.

    The last look gets ``final_share * alpha`` and the ``K - 1`` earlier ones
    ``(1 - final_share) * alpha / (K - 1)`` each (all of ``alpha`` when ``K = 1``).
    By the union bound the probability that *any* look's lower bound exceeds
    ``p_A`` is at most the sum, ``alpha`` (module docstring): the exact sum of the
    float levels, the early ones stepped down an ulp where it would exceed ``alpha``
    (``rsjax.claims.budget_alphas``, which ``rsjax verify`` recomputes).
    """
    alpha = stats.check_alpha(alpha)
    k = len(self.looks(n_max))
    return np.asarray(budget_alphas(alpha, k, float(self.final_share)), np.float64)

  def run(
    self, key: jax.Array, counts: CountsFn, rule: RuleFn, settings: Sampling
  ) -> BudgetedCertificate:
    """Budgeted CERTIFY, the sampling rule (``rsjax.engine.driver.SamplingRule``).

    The ``n0`` selection samples (:func:`budgeted_selection`: the engine's counts and
    Cohen's binary rule only), then the estimation in rounds (``fold_in(key, 1)``,
    :func:`sequential_bounds`) until each input's grid radius is decided or it has
    ``settings.n`` samples; the radius of the bound at its stopping look is
    ``rule.radius``'s.

    Raises:
      ValueError: for another method or ``batch_size="auto"``.
    """
    source, cohen, c0 = budgeted_selection(key, counts, rule, settings)
    # The looks' samples of the inputs still running are drawn in rounds on device
    # (rsjax.engine.rounds); the host decides after each which inputs stop.
    k_est, n = jax.random.fold_in(key, ESTIMATION), settings.n
    count_fn, counts1 = round_counter(k_est, source, c0.argmax(axis=1), settings)
    _, used, p_lower = sequential_bounds(
      count_fn, len(source.x), n_max=n, alpha=settings.alpha, budget=self, noise=settings.noise,
      scale=cohen.scale, dim=cohen.dim,
    )  # fmt: skip
    test = (
      f": one-sided Clopper-Pearson at {len(self.looks(n))} fixed looks up to n={n} samples "
      "with alpha split over them, union bound"
    )
    return BudgetedCertificate.of_bounds(
      cohen, c0, counts1.astype(np.int32), used, p_lower, settings, self.grid, test
    )


def radius_grid(grid: Sequence[float]) -> tuple[float, ...]:
  """The radius grid of a budgeted sampling rule, checked, with 0 first (added when missing).

  Args:
    grid: radii, ascending, >= 0.

  Raises:
    ValueError: not a non-empty, finite, >= 0 and strictly increasing sequence.
  """
  try:
    g = np.asarray(grid, dtype=np.float64).reshape(-1)
  except (TypeError, ValueError):
    raise ValueError(f"grid must be a sequence of radii, got {grid!r}") from None
  if g.size == 0 or not np.all(np.isfinite(g)) or np.any(g < 0) or np.any(np.diff(g) <= 0):
    raise ValueError(f"grid must be non-empty, finite, >= 0 and strictly increasing, got {grid!r}")
  if g[0] != 0.0:
    g = np.concatenate([[0.0], g])
  return tuple(float(r) for r in g)


def check_looks(first: int, ratio: float) -> None:
  """Raises ``ValueError`` unless ``first`` (samples at the first look) is an integer >= 1
  and ``ratio`` (the looks' growth) > 1."""
  if isinstance(first, bool) or not isinstance(first, (int, np.integer)) or first < 1:
    raise ValueError(f"first must be an integer >= 1, got {first!r}")
  if not float(ratio) > 1.0:
    raise ValueError(f"ratio must be > 1, got {ratio!r}")


def budgeted_selection(
  key: jax.Array, counts: CountsFn, rule: RuleFn, settings: Sampling
) -> tuple[EngineCounts, CohenRule, np.ndarray]:
  """The selection pass of budgeted CERTIFY (``n0`` samples, ``fold_in(key, SELECTION)``).

  Args:
    key: the call's key.
    counts: the method's counts source: the engine's (``EngineCounts``).
    rule: the method's certificate rule: Cohen's binary ``CohenRule``.
    settings: the sampling settings; an integer ``batch_size``.

  Returns:
    ``(counts, rule, c0)``: the source and rule as the budget reads them, and the
    ``[B, C]`` selection counts.

  Raises:
    ValueError: for another method or ``batch_size="auto"``.
  """
  if not isinstance(counts, EngineCounts) or not isinstance(rule, CohenRule) or rule.multiclass:
    raise ValueError(
      "budgeted CERTIFY runs on the engine's counts with Cohen's binary radius "
      "(rsjax.certify(..., budget=...)), not this method"
    )
  settings.fixed_batch("budgeted CERTIFY")
  return counts, rule, resolve_counts(counts(jax.random.fold_in(key, SELECTION), settings.n0))


def as_budget(budget: Budget | Sequence[float]) -> Budget:
  """A :class:`Budget`, or the default looks for a radius grid (a sequence of radii).

  Another budgeted sampling rule (``rsjax.engine.anytime.Anytime``: a value
  with ``grid`` and ``run``) is returned as it is.

  Raises:
    ValueError: for a bad grid.
  """
  if isinstance(budget, Budget) or (hasattr(budget, "run") and hasattr(budget, "grid")):
    return budget  # type: ignore[return-value]
  return Budget(grid=tuple(np.asarray(budget, np.float64).reshape(-1)))


def grid_level(
  p: ArrayLike,
  grid: Sequence[float],
  *,
  noise: noise_lib.Noise | str | None = None,
  scale: ArrayLike = 1.0,
  dim: int = 1,
) -> np.ndarray:
  """Grid level of a probability bound: the index of the largest ``grid`` radius
  ``<= radius(p)``, or -1 (abstain) where ``p < 1/2``.

  ``grid`` starts at 0, so ``p >= 1/2`` gives a level >= 0, as CERTIFY predicts
  at ``p_lower >= 1/2`` with radius 0 at exactly 1/2. The comparison is
  ``radius >= r``, the one of ``rsjax.metrics.certified_accuracy``.
  """
  noise = noise_lib.get_noise(noise)
  p = np.asarray(p, dtype=np.float64)
  return radius_level(p, np.asarray(noise.radius(p, scale, dim), dtype=np.float64), grid)


def sequential_bounds(
  count_fn: CountFn,
  num_inputs: int,
  *,
  n_max: int,
  alpha: float,
  budget: Budget,
  noise: noise_lib.Noise | str | None = None,
  scale: ArrayLike = 1.0,
  dim: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The looks, bounds and stopping rule on the host, for any source of counts.

  Args:
    count_fn: ``count_fn(active [m] int, start, stop) -> [m]`` top-class
      successes among samples ``start .. stop - 1`` of the inputs ``active``
      (positions in ``0 .. num_inputs - 1``). The device engine in
      :func:`certify_prepared`; simulated binomial counts in the coverage test.
    num_inputs: B.
    n_max: the largest number of estimation samples per input.
    alpha: the error level per input (split over the looks).
    budget: grid and looks.
    noise: noise family of the radius.
    scale: ``[B]`` (or scalar) noise scale of the radius.
    dim: input dimension (Linf radius of uniform noise).

  Returns:
    ``(successes [B] int64, samples [B] int64, p_lower [B] float64)``: the
    top-class count, the number of estimation samples used and the lower bound
    at the look where each input stopped.
  """
  noise = noise_lib.get_noise(noise)
  looks, alphas = budget.looks(n_max), budget.alphas(alpha, n_max)
  scale = np.broadcast_to(np.asarray(scale, np.float64), (num_inputs,))

  def decide(s_a: np.ndarray, k: int, active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    level = functools.partial(
      grid_level, grid=budget.grid, noise=noise, scale=scale[active], dim=dim
    )
    # The rule's decision at this look, one pure function of the count (module docstring;
    # rsjax verify calls the same one on a row's recorded counts).
    return looks_decision(
      s_a, k, looks=looks, alphas=alphas, stop_alpha=budget.stop_alpha, level=level,
      margin=noise.p_lower_margin,
    )  # fmt: skip

  return run_looks(looks.tolist(), count_fn, num_inputs, decide)


@dataclasses.dataclass(frozen=True)
class BudgetedCertificate(Certificate):
  """A :class:`rsjax.Certificate` of budgeted CERTIFY, plus the samples used.

  Attributes:
    num_samples: ``[B]`` int64 estimation samples used per input (the ``n0``
      selection samples come on top).
    grid: the radius grid it stopped on.
  """

  num_samples: np.ndarray | None = None
  grid: tuple[float, ...] = ()

  columns: ClassVar[tuple[str, ...]] = ("samples",)

  def row_fields(self, j: int) -> dict:
    assert self.num_samples is not None  # set by every budgeted run
    return {"samples": int(self.num_samples[j])}

  @classmethod
  def of_bounds(
    cls,
    rule: CohenRule,
    c0: np.ndarray,
    counts: np.ndarray,
    used: np.ndarray,
    p_lower: np.ndarray,
    settings: Sampling,
    grid: tuple[float, ...],
    test: str,
  ) -> BudgetedCertificate:
    """The certificate of a budgeted run: the selection's top class where the bound is
    >= 1/2 (else abstain), with ``rule``'s radius of the bound.

    Args:
      rule: Cohen's binary rule of the run.
      c0: ``[B, C]`` selection counts.
      counts: ``[B, C]`` estimation counts.
      used: ``[B]`` estimation samples used.
      p_lower: ``[B]`` lower bound of ``p_A``.
      settings: the sampling settings.
      grid: the radius grid it stopped on.
      test: the looks' test, in words (the guarantee's "budgeted CERTIFY{test}").
    """
    noise, alpha = settings.noise, settings.alpha
    ok = p_lower >= 0.5
    return cls(
      prediction=np.where(ok, c0.argmax(axis=1), ABSTAIN).astype(np.int64),
      radius=rule.radius(p_lower),
      p_lower=np.asarray(p_lower, np.float64),
      counts=counts,
      counts_selection=c0,
      norm=noise.norm,
      guarantee=(
        f"binary {noise.name} {noise.norm} (budgeted CERTIFY{test}){noise.certifies}; holds "
        f"with prob >= 1 - {alpha} per input for the given sigma held fixed (not a guarantee "
        "if sigma was chosen from x: see rsjax.idrs)"
      ),
      num_samples=used,
      grid=grid,
    )
