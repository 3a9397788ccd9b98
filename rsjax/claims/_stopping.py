"""The budgeted rules' stopping decision at a look, and ``rsjax verify``'s check of it.

The decision of each rule at a look is one pure function of the count there (and of
the run's settings), written once here: the engine's rules call it to decide
(``rsjax.engine.budget.sequential_bounds``, ``rsjax.engine.anytime_table.Decisions``),
and verify calls it on a row's recorded counts, so the two cannot disagree.

What verify re-derives: a row that stopped at a look ``n < N`` has, as its recorded
estimation counts, the counts at that look, so whether its rule stops there follows
from them; a row whose counts there do not meet its rule's stopping test did not stop
where its rule says. What it cannot: whether the row should already have stopped at an
earlier look (the counts at the earlier looks are not stored; only the audit, which
draws the row's samples again and runs the rule over them, sees them). A row at ``N``
needs nothing: the last look always stops. The rule's ``stop_alpha`` is the run's
schedule's (``method.details``, outside the claim digest; the audit rebuilds the
schedule and compares). Stopping is efficiency, not soundness (either rule's bound
holds whatever the looks it stops at), so this checks that the ``samples`` column is
the rule's, not the certificate.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from rsjax import _lazy, stats
from rsjax.claims._formulas import P_LOWER_MARGIN, binary_radius, directed, round_down
from rsjax.claims._mismatch import Mismatch

_stats = _lazy.module("scipy.stats")  # on first use: start-up pays no SciPy

if TYPE_CHECKING:
  from rsjax.claims._rows import Rows
  from rsjax.records.io import CertifyResults

__all__ = [
  "anytime_need",
  "anytime_stop",
  "cp_count",
  "level_words",
  "looks_decision",
  "looks_stop_issues",
  "radius_level",
  "record_level",
  "record_stop_alpha",
  "stop_mismatches",
  "stop_quantile",
]

#: A grid level of probability bounds: ``level(p [m]) -> [m]`` int64 (:func:`radius_level`).
LevelFn = Callable[[np.ndarray], np.ndarray]


def radius_level(p: ArrayLike, radius: ArrayLike, grid: ArrayLike) -> np.ndarray:
  """Grid level of bounds ``p`` of radii ``radius``: the index of the largest ``grid`` radius
  ``<= radius``, or -1 (abstain) where ``p < 1/2`` (``grid`` starts at 0)."""
  lvl = np.searchsorted(np.asarray(grid, np.float64), radius, side="right") - 1
  return np.where(np.asarray(p, np.float64) >= 0.5, lvl, -1)


def looks_decision(
  successes: ArrayLike,
  k: int,
  *,
  looks: ArrayLike,
  alphas: ArrayLike,
  stop_alpha: float,
  level: LevelFn,
  margin: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
  """The looks rule's decision at look ``k`` (``rsjax.engine.budget``): ``(p_lower, stop)``.

  ``p_lower`` is the one-sided Clopper-Pearson bound at ``alphas[k]`` (rounded down by
  ``margin``); the input stops when the level of ``p_lower`` is already the highest it
  could still end at: the smaller of the level of the upper bound at ``stop_alpha`` and
  that of the best bound a later look ``j`` could plausibly give (the ``n_j - n_k`` new
  samples at their upper ``stop_alpha`` quantile at that upper bound). At the last look
  every input stops.

  Args:
    successes: ``[m]`` top-class counts after ``looks[k]`` samples.
    k: the look, ``0 <= k < K``.
    looks: ``[K]`` the looks, the last one ``N``.
    alphas: ``[K]`` the level of each look.
    stop_alpha: the level of the stopping tests.
    level: the grid level of ``[m]`` bounds of these inputs.
    margin: the noise's relative rounding of the bound (``rsjax.claims.round_down``).
  """
  looks, alphas = np.asarray(looks, np.int64), np.asarray(alphas, np.float64)
  s_a = np.asarray(successes, np.int64)
  n_k = looks[k]
  lb = round_down(stats.clopper_pearson_lower(s_a, n_k, alphas[k]), margin)
  if k + 1 >= len(looks):
    return lb, np.ones(len(s_a), bool)
  ub = stats.clopper_pearson_upper(s_a, n_k, stop_alpha)
  later = zip(looks[k + 1 :], alphas[k + 1 :], strict=True)
  best = np.max(
    [
      stats.clopper_pearson_lower(s_a + _stats.binom.ppf(1.0 - stop_alpha, n_j - n_k, ub), n_j, a_j)
      for n_j, a_j in later
    ],
    axis=0,
  )
  return lb, level(lb) >= np.minimum(level(ub), level(best))


@functools.lru_cache(maxsize=512)
def cp_count(m: float, n: int, a: float) -> int:
  """The least count ``S`` with ``clopper_pearson_lower(S, n, a) >= m`` (``n + 1``: none)."""
  lo, hi = 0, n + 1
  while lo < hi:
    mid = (lo + hi) // 2
    if stats.clopper_pearson_lower(mid, n, a) >= m:
      hi = mid
    else:
      lo = mid + 1
  return lo


def anytime_need(c_final: ArrayLike, m: ArrayLike, n_max: int, cp_alpha: float) -> np.ndarray:
  """``[..., L]`` int64 least count at ``n_max`` that certifies each grid level under the
  Anytime rule: its mixture test (and every lower level's) at the last look, or the
  Clopper-Pearson bound at ``cp_alpha`` reaching its threshold ``m``.

  Args:
    c_final: ``[..., L]`` the mixture thresholds of the levels at ``n_max``.
    m: ``[..., L]`` the levels' probability thresholds (``inf``: out of reach).
    n_max: N.
    cp_alpha: the level of the Clopper-Pearson look at ``n_max``.
  """
  cp = np.asarray([[cp_count(v, n_max, cp_alpha) for v in row] for row in np.atleast_2d(m)])
  return np.minimum(
    np.maximum.accumulate(np.asarray(c_final), axis=-1), cp.reshape(np.shape(m))
  ).astype(np.int64)


def stop_quantile(stop_alpha: float) -> float:
  """The Anytime rule's ``z_stop``: the upper ``stop_alpha`` normal quantile."""
  return float(_stats.norm.isf(stop_alpha))


def anytime_stop(
  successes: ArrayLike, level: ArrayLike, need: ArrayLike, n_k: int, n_max: int, z_stop: float
) -> np.ndarray:
  """Whether the Anytime rule stops at a look ``n_k < n_max`` (``rsjax.engine.anytime``).

  An input stops when its level is the grid's top, or when the count at ``n_max`` the
  level above needs lies beyond the predicted count by more than ``z_stop`` standard
  deviations (``p_A`` estimated from the count so far; the spread of the estimate and of
  the samples still to come together).

  Args:
    successes: ``[m]`` top-class counts after ``n_k`` samples.
    level: ``[m]`` their mixture level at the look (-1: none).
    need: ``[m, L]`` the least count at ``n_max`` that certifies each level
      (:func:`anytime_need`).
    n_k: the look.
    n_max: N.
    z_stop: the upper ``stop_alpha`` normal quantile.

  Returns:
    ``[m]`` bool.
  """
  s_a, lvl = np.asarray(successes, np.int64), np.asarray(level, np.int64)
  need = np.asarray(need, np.int64)
  p_hat = (s_a + 0.5) / (n_k + 1.0)
  rest = n_max - n_k
  sd = np.sqrt(rest * p_hat * (1.0 - p_hat) * (1.0 + rest / n_k))
  best = np.minimum(s_a + rest * p_hat + z_stop * sd, s_a + rest)
  top = need.shape[1] - 1
  reach = best >= need[np.arange(len(s_a)), np.minimum(lvl + 1, top)]
  return (lvl >= top) | ~reach


def record_stop_alpha(budget: dict, issues: list[Mismatch]) -> float | None:
  """The ``stop_alpha`` a budgeted run's schedule records, or None (reported) when it is
  not a number in (0, 1)."""
  a = budget.get("stop_alpha")
  if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0 < a < 1:
    issues.append(Mismatch(-1, f"the budgeted schedule's stop_alpha {a!r} is not in (0, 1)"))
    return None
  return float(a)


def level_words(level: int) -> str:
  """A grid level in a message: ``grid level 1``, or ``nothing (abstains)`` for -1."""
  return "nothing (abstains)" if level < 0 else f"grid level {level}"


def stop_mismatches(
  res: CertifyResults,
  rows: Rows,
  looks: list[int],
  decide: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]],
  why: Callable[[int], str],
) -> list[Mismatch]:
  """One :class:`Mismatch` per valid row that stopped at a look ``n < N`` whose counts
  there do not meet its rule's stopping test.

  Args:
    res: the file's rows.
    rows: their parsed counts.
    looks: ``[K]`` the rule's looks, the last one ``N``.
    decide: ``decide(successes [m], k) -> (level [m], stop [m])``: the rule's grid level
      and decision at look ``k < K - 1``.
    why: ``why(level)``: why the rule goes on at that level, in words (ending the message).
  """
  pos = {n: k for k, n in enumerate(looks[:-1])}
  at = np.asarray([pos.get(int(n), -1) for n in rows.n], np.int64)
  out: list[Mismatch] = []
  for k in np.unique(at[rows.valid & (at >= 0)]).tolist():
    js = np.flatnonzero(rows.valid & (at == k))
    level, stop = decide(rows.n_a[js], k)
    for j, lvl in zip(js[~stop].tolist(), level[~stop].tolist(), strict=True):
      out.append(
        Mismatch(
          int(res.idx[j]),
          f"stopped at {looks[k]:,} samples (look {k + 1} of {len(looks)}), but its counts "
          f"there (n_A {rows.n_a[j]} of {looks[k]}) do not meet the stopping rule: {why(lvl)}",
        )
      )
  return out


def record_level(cert: dict, scale: float) -> LevelFn:
  """The grid level of a budgeted run's bounds (its record's grid, 0 added when missing),
  by the radius of its noise at ``scale`` (:func:`radius_level`)."""
  grid = [float(r) for r in cert["budget"]["grid"]]
  if not grid or grid[0] != 0.0:
    grid = [0.0, *grid]
  dim = int(np.prod(cert["input_shape"]))
  return lambda p: radius_level(p, binary_radius(p, scale, cert["noise"], dim), grid)


def looks_stop_issues(
  cert: dict, res: CertifyResults, rows: Rows, levels: dict[int, float], scale: float
) -> list[Mismatch]:
  """The rows of a looks-rule run that stopped before ``N`` where the rule does not stop.

  Args:
    cert: the run (``rsjax.verify``'s view).
    res: the file's rows.
    rows: their parsed counts.
    levels: ``{look: alpha_k}`` (``rsjax.claims.budget_levels``).
    scale: the noise scale.
  """
  issues: list[Mismatch] = []
  stop_alpha = record_stop_alpha(cert["budget"], issues)
  if stop_alpha is None:
    return issues
  looks = sorted(levels)
  alphas = [levels[n] for n in looks]
  level = record_level(cert, scale)
  margin = P_LOWER_MARGIN if directed(cert.get("noise", {})) else 0.0

  def decide(s: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    lb, stop = looks_decision(
      s, k, looks=looks, alphas=alphas, stop_alpha=stop_alpha, level=level, margin=margin
    )
    return level(lb), stop

  def why(lvl: int) -> str:
    return (
      f"it certifies {level_words(lvl)} there, which could still rise by N={looks[-1]:,} "
      f"(the looks rule's tests at stop_alpha {stop_alpha:g})"
    )

  return stop_mismatches(res, rows, looks, decide, why)
