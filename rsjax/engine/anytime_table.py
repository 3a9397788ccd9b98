"""The ``Anytime`` rule's decision table: its thresholds, its decision at a look, its exact error.

``rsjax.engine.anytime.Anytime`` reads each input's count at every look and
decides there (:meth:`Decisions.decide`): the certified grid level if it stops,
and whether it stops. The decision is one pure function of the count, built
once per ``(rule, n_max, alpha, noise scales)`` by :func:`anytime_decisions`;
:func:`run_decisions` applies it to any source of counts (the engine's rounds,
simulated streams), and :func:`exact_error` applies it to every reachable count
at every look: the exact probability, stopping and futility included, that the
rule certifies a level when ``p_A`` sits exactly on its threshold.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Protocol

import numpy as np
import scipy.stats
from jax.typing import ArrayLike
from scipy import signal

from rsjax import noise as noise_lib
from rsjax import stats
from rsjax.claims import (
  anytime_need,
  anytime_stop,
  cp_count,
  level_probability,
  mixture_thresholds,
  nested_level,
  round_down,
  split_alpha,
  stop_quantile,
)
from rsjax.engine.rounds import CountFn

__all__ = [
  "Decisions",
  "anytime_decisions",
  "cp_count",
  "crossing_probability",
  "exact_error",
  "level_table",
  "run_decisions",
]


class RuleSettings(Protocol):
  """What the table is built from: ``rsjax.engine.anytime.Anytime``'s fields."""

  @property
  def grid(self) -> tuple[float, ...]: ...
  @property
  def mixture_share(self) -> float: ...
  @property
  def agree_weight(self) -> float: ...
  @property
  def stop_alpha(self) -> float: ...
  def looks(self, n_max: int) -> np.ndarray: ...


def level_table(
  grid: tuple[float, ...], noise: noise_lib.Noise, scale: float, dim: int
) -> np.ndarray:
  """``[L]`` the probability thresholds ``m_j`` of the grid levels at one noise scale
  (``inf``: out of reach)."""
  return np.asarray(
    [level_probability(lambda p: float(noise.radius(np.float64(p), scale, dim)), r) for r in grid]
  )


@dataclasses.dataclass(frozen=True)
class Decisions:
  """The ``Anytime`` rule's decision at a look, for inputs at a few noise scales.

  One pure function of the count (:meth:`decide`), which ``anytime_bounds``
  applies at every look and the tests apply to every reachable count (the
  exact error of the rule, stopping included). Built by :func:`anytime_decisions`.

  Attributes:
    looks: ``[K]`` int64 looks, the last one ``n_max``.
    m: ``[U, L]`` float64 probability thresholds of the grid levels per noise
      scale (``inf``: out of reach).
    c: ``[U, L, K]`` int64 mixture thresholds (at ``mixture_share * alpha``) of
      each level at each look.
    need: ``[U, L]`` int64 least count at ``n_max`` that certifies each level
      (mixture or Clopper-Pearson).
    cp_alpha: level of the Clopper-Pearson look at ``n_max`` (the rest of
      ``alpha`` after the mixture's share).
    z_stop: upper ``stop_alpha`` normal quantile of the stopping rule.
    cp_margin: relative margin by which the Clopper-Pearson bound is rounded down
      (the noise's ``p_lower_margin``: 0 but for the sound 8-bit noise).
  """

  looks: np.ndarray
  m: np.ndarray
  c: np.ndarray
  need: np.ndarray
  cp_alpha: float
  z_stop: float
  cp_margin: float = 0.0

  def level(self, successes: ArrayLike, k: int, scale_index: ArrayLike = 0) -> np.ndarray:
    """``[m]`` int64 mixture level at look ``k`` (-1: none), Clopper-Pearson aside.

    Args:
      successes: ``[m]`` top-class counts after ``looks[k]`` samples.
      k: the look, ``0 <= k < K``.
      scale_index: ``[m]`` (or scalar) row of ``m`` and ``c`` of each input.
    """
    s = np.asarray(successes, np.int64).reshape(-1)
    u = np.broadcast_to(np.asarray(scale_index, np.int64), s.shape)
    return nested_level(s, self.c[u, :, range(len(self.looks))[k]])

  def decide(
    self, successes: ArrayLike, k: int, scale_index: ArrayLike = 0
  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The decision at look ``k`` for inputs still running there.

    Args:
      successes: ``[m]`` top-class counts after ``looks[k]`` samples.
      k: the look, ``0 <= k < K``.
      scale_index: ``[m]`` (or scalar) row of ``m`` and ``c`` of each input.

    Returns:
      ``(level [m] int64, p_lower [m] float64, stop [m] bool)``: the certified
      grid level (-1: abstain) and bound if the input stops here; at the last
      look every input stops, with the larger of the mixture's ``m_j`` and the
      Clopper-Pearson bound at ``cp_alpha``.
    """
    k = range(len(self.looks))[k]
    s_a = np.asarray(successes, np.int64).reshape(-1)
    u_a = np.broadcast_to(np.asarray(scale_index, np.int64), s_a.shape)
    n_k, n_max = int(self.looks[k]), int(self.looks[-1])
    lvl = self.level(s_a, k, u_a)
    m_a = np.where(lvl >= 0, self.m[u_a, np.maximum(lvl, 0)], 0.0)
    if k + 1 == len(self.looks):
      cp = round_down(stats.clopper_pearson_lower(s_a, n_k, self.cp_alpha), self.cp_margin)
      m_a = np.maximum(m_a, cp)
      level = np.sum(self.m[u_a] <= m_a[:, None], axis=1).astype(np.int64) - 1
      return level, m_a, np.ones(len(s_a), bool)
    # Stopping only: the level above out of reach by n_max, or the grid's top
    # (rsjax.claims.anytime_stop; rsjax verify calls it on a row's recorded counts).
    return lvl, m_a, anytime_stop(s_a, lvl, self.need[u_a], n_k, n_max, self.z_stop)


def anytime_decisions(
  budget: RuleSettings,
  *,
  n_max: int,
  alpha: float,
  noise: noise_lib.Noise | str | None = None,
  scales: ArrayLike = 1.0,
  dim: int = 1,
) -> Decisions:
  """The rule's tables for ``n_max`` and ``alpha`` at each of ``scales`` (``[U]``).

  Args:
    budget: grid, looks and stopping level.
    n_max: the largest number of estimation samples per input.
    alpha: the error level per input.
    noise: noise family of the radius.
    scales: ``[U]`` (or scalar) noise scales; row ``u`` of the tables is ``scales[u]``'s.
    dim: input dimension (Linf radius of uniform noise).
  """
  alpha = stats.check_alpha(alpha)
  noise = noise_lib.get_noise(noise)
  looks = budget.looks(n_max)
  lk = tuple(int(v) for v in looks)
  uniq = np.asarray(scales, np.float64).reshape(-1)
  ms = np.stack([level_table(budget.grid, noise, float(s), dim) for s in uniq])  # [U, L]
  # c[u, j, k]: threshold of level j at look k for noise scale u.
  a_mix, cp_alpha = split_alpha(alpha, float(budget.mixture_share))  # exact sum <= alpha
  w = float(budget.agree_weight)
  c = np.stack([np.stack([mixture_thresholds(m, a_mix, lk, w) for m in row]) for row in ms])
  need = anytime_need(c[:, :, -1], ms, n_max, cp_alpha)
  z_stop = stop_quantile(budget.stop_alpha)
  return Decisions(looks=looks, m=ms, c=c, need=need, cp_alpha=cp_alpha, z_stop=z_stop,
                   cp_margin=noise.p_lower_margin)  # fmt: skip


def run_decisions(
  table: Decisions, count_fn: CountFn, scale_index: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Every input through the looks of one decision table until it stops.

  Args:
    table: the rule's decisions (:func:`anytime_decisions`, or tables built
      otherwise, e.g. by a benchmark comparing tests).
    count_fn: as in :func:`anytime_bounds`.
    scale_index: ``[B]`` int row of ``table`` of each input.

  Returns:
    ``(successes [B] int64, samples [B] int64, p_lower [B] float64)`` at the
    look where each input stopped.
  """
  which = np.asarray(scale_index, np.int64).reshape(-1)

  def decide(s_a: np.ndarray, k: int, active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return table.decide(s_a, k, which[active])[1:]

  return run_looks(table.looks.tolist(), count_fn, len(which), decide)


def run_looks(
  looks: list[int],
  count_fn: CountFn,
  num_inputs: int,
  decide: Callable[[np.ndarray, int, np.ndarray], tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The sequential loop of a budgeted rule on the host: count each running input's
  successes up to look ``k``, stop those ``decide`` stops, until none runs or the looks end.

  Args:
    looks: ``n_1 < ... < n_K``, the sample counts of the looks.
    count_fn: ``count_fn(active [m] int, start, stop) -> [m]`` top-class successes among
      samples ``start .. stop - 1``.
    num_inputs: B.
    decide: ``decide(successes [m], k, active [m]) -> (p_lower [m], stop [m] bool)`` at look
      ``k`` for the running inputs ``active``.

  Returns:
    ``(successes [B] int64, samples [B] int64, p_lower [B] float64)`` at the look where
    each input stopped.
  """
  successes = np.zeros(num_inputs, np.int64)
  samples = np.zeros(num_inputs, np.int64)
  p_lower = np.zeros(num_inputs, np.float64)
  active = np.arange(num_inputs)
  start = 0
  for k, n_k in enumerate(looks):
    successes[active] += np.asarray(count_fn(active, start, n_k), np.int64)
    samples[active] = n_k
    lb, stop = decide(successes[active], k, active)
    p_lower[active[stop]] = lb[stop]
    active = active[~stop]
    start = n_k
    if active.size == 0:
      break
  return successes, samples, p_lower


def exact_error(table: Decisions, j: int, scale_index: int = 0) -> tuple[float, float]:
  """The rule's exact probability of certifying level ``j`` at ``p_A = m_j``.

  A forward recursion over the count distribution of the inputs still running:
  at every look, every reachable count is decided by ``table.decide``, and the
  mass that stops with a bound ``p_lower >= m_j`` is summed, split by what
  certified it (float64 convolutions; FFT for large ones, clipped at 0).

  Args:
    table: the rule's decisions.
    j: the grid level, with ``m_j < 1``.
    scale_index: the row of ``table`` (noise scale).

  Returns:
    ``(mixture, clopper_pearson)``: the probability of stopping with ``p_lower >=
    m_j`` at a look where level ``j``'s mixture test rejects, and at ``n_max`` by
    the Clopper-Pearson bound alone. Their sum is the rule's error at ``m_j``,
    which bounds it at every ``p_A <= m_j``.
  """
  p, looks = float(table.m[scale_index, j]), table.looks.tolist()
  dist, n, mix, cp = np.ones(1), 0, 0.0, 0.0  # dist: counts of the inputs still running
  for k, n_k in enumerate(looks):
    step = scipy.stats.binom.pmf(np.arange(n_k - n + 1), n_k - n, p)
    if len(dist) * len(step) > 4_000_000:
      dist = np.clip(signal.fftconvolve(dist, step), 0.0, None)
    else:
      dist = np.convolve(dist, step)
    n, s = n_k, np.arange(n_k + 1)
    _, p_lower, stop = table.decide(s, k, scale_index)
    wrong = stop & (p_lower >= p)
    by_mixture = table.level(s, k, scale_index) >= j
    mix += float(dist[wrong & by_mixture].sum())
    cp += float(dist[wrong & ~by_mixture].sum())
    dist = np.where(stop, 0.0, dist)
  return mix, cp


def crossing_probability(
  looks: ArrayLike, thresholds: ArrayLike, ps: ArrayLike, *, width: float = 12.0
) -> tuple[np.ndarray, np.ndarray]:
  """``P_p(exists k: S(n_k) >= thresholds[k])`` for i.i.d. Bernoulli(``p``) samples, each ``p``.

  One level's test run to ``n_max`` over every look, without stopping (the event
  that bounds the rule's mixture error at that level, whatever it stops on). A
  forward recursion over the count distribution of the paths not yet crossed,
  all ``ps`` at once, each on a window of ``width`` standard deviations (and ``2 width`` counts) either side of
  its mean (float64 FFT convolutions, clipped at 0). What leaves the windows is
  not dropped silently: its mass is returned, and ``crossed + outside`` is an
  upper bound of the probability.

  Args:
    looks: ``[K]`` increasing sample counts.
    thresholds: ``[K]`` crossing counts (``> n_k``: no crossing at look ``k``), or
      ``[P, K]``: one row per ``p``.
    ps: ``[P]`` success probabilities in ``[0, 1]``.
    width: half-width of the windows in standard deviations.

  Returns:
    ``(crossed [P], outside [P])`` float64.
  """
  looks = np.asarray(looks, np.int64)
  ps = np.asarray(ps, np.float64).reshape(-1)
  c = np.broadcast_to(np.asarray(thresholds, np.int64), (len(ps), len(looks)))
  v = float(np.max(ps * (1.0 - ps)))
  rows = np.arange(len(ps))[:, None]

  def window(n: int) -> tuple[np.ndarray, int]:  # start [P] and width of the window at n trials
    h = math.ceil(width * math.sqrt(n * v) + 2 * width)  # the 2 width: skewed tails near 0, 1
    return np.clip(np.round(n * ps).astype(np.int64) - h, 0, None), 2 * h + 1

  dist, lo = np.ones((len(ps), 1)), np.zeros(len(ps), np.int64)  # counts lo .. lo + width - 1
  crossed, outside = np.zeros(len(ps)), np.zeros(len(ps))
  n = 0
  for n_k, c_k in zip(looks.tolist(), c.T, strict=True):
    d = n_k - n
    s_lo, s_w = window(d)
    j = np.minimum(s_lo[:, None] + np.arange(s_w), d + 1)  # d + 1: pmf 0
    step = scipy.stats.binom.pmf(j, d, ps[:, None])
    # The step's mass outside its window, times the mass it would have moved.
    cut = scipy.stats.binom.cdf(s_lo - 1, d, ps) + scipy.stats.binom.sf(s_lo + s_w - 1, d, ps)
    outside += cut * dist.sum(axis=1)
    if dist.shape[1] * s_w > 2_000:
      dist = np.clip(signal.fftconvolve(dist, step, axes=1), 0.0, None)
    else:
      dist = np.stack([np.convolve(a, b) for a, b in zip(dist, step, strict=True)])
    lo, n = lo + s_lo, n_k
    count = lo[:, None] + np.arange(dist.shape[1])
    over = count >= c_k[:, None]
    crossed += np.where(over, dist, 0.0).sum(axis=1)
    dist = np.where(over, 0.0, dist)
    # Re-window around the new mean; the mass left out is counted in ``outside``.
    new_lo, w = window(n)
    idx = new_lo[:, None] - lo[:, None] + np.arange(w)
    ok = (idx >= 0) & (idx < dist.shape[1])
    kept = np.where(ok, dist[rows, np.clip(idx, 0, dist.shape[1] - 1)], 0.0)
    outside += np.maximum(dist.sum(axis=1) - kept.sum(axis=1), 0.0)
    dist, lo = kept, new_lo
  return crossed, outside
