"""The anytime-valid grid test of budgeted CERTIFY's ``Anytime`` rule (NumPy and SciPy only).

For a grid level with probability threshold ``m`` (the smallest ``p`` whose
radius reaches the level's radius), a one-sided mixture of likelihood ratios
against ``p = m``::

  M_t(S) = w 1[S = t] m^-t
         + (1 - w) int_m^1 (q / m)^S ((1 - q) / (1 - m))^(t - S) dpi_m(q),

``pi_m`` the Beta(1/2, 1/2) prior restricted to ``[m, 1]`` and renormalized
(the one-sided Krichevsky-Trofimov mixture), and ``w`` the prior's weight on
``q = 1`` exactly (the *agree weight*: every sample of the top class). Each
part is a nonnegative supermartingale with value 1 at ``t = 0`` whenever
``p_A <= m`` (a factor of the KT part has mean
``p_A q / m + (1 - p_A)(1 - q) / (1 - m) <= 1`` for ``q >= m``; of the first,
``p_A / m <= 1``), and so is their convex combination. By Ville's inequality
``P(exists t: M_t >= 1 / a) <= a``: the level may be tested after every
sample, at any data-dependent times, at no cost in ``a``. ``M_t`` increases in
``S``, so the test is an integer threshold ``c(t)``: the smallest ``S`` with
``M_t(S) >= 1 / a`` (``t + 1`` when none).

Why the weight on ``q = 1``: most inputs of a certification set see every
noisy sample agree (75 of 100 MNIST digits at sigma 0.25 in
``benchmarks/results/budgeted.json``). For them the KT part needs
about ``log(1 / a) / -log(m)`` samples plus the log of the inverse prior mass
within ``1 / t`` of 1; the point mass replaces that with ``log(1 / w)``, and
costs every other input ``log(1 / (1 - w))`` (``w = 1/2``: 0.69 nats; the
measured trade-off is ``benchmarks.budgeted.frontier``). ``w = 0`` is the plain
KT mixture (records written before the weight was a field). Voracek (NeurIPS
2024, "Treatment of statistical estimation problems in randomized smoothing",
arXiv 2406.17830) uses the two-sided KT mixture; the prior here puts all its
mass on the alternatives of the one test that matters for the level.

The thresholds are computed in float64 on the host (``betaln``, ``betaincc``)
and cached per ``(m, a, looks, w)``; the engine's rule and ``rsjax verify`` both
call :func:`mixture_thresholds`. Their validity, float rounding included, is
checked exactly by a forward recursion over the count distribution in the tests.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from rsjax import _lazy

special = _lazy.module("scipy.special")  # on first use: start-up pays no SciPy

__all__ = [
  "anytime_looks",
  "level_probability",
  "mixture_log_wealth",
  "mixture_thresholds",
  "nested_level",
]


def anytime_looks(n_max: int, first: int, ratio: float) -> list[int]:
  """The looks ``n_1 < ... < n_K = n_max``: ``first``, then ``max(n + 1, ceil(ratio n))``."""
  out, n = [], min(int(first), int(n_max))
  while n < n_max:
    out.append(n)
    n = max(n + 1, math.ceil(min(n * float(ratio), n_max)))  # no ceil(inf)
  return out + [int(n_max)]


def mixture_log_wealth(
  s: np.ndarray, t: np.ndarray, m: float, agree_weight: float = 0.0
) -> np.ndarray:
  """``log M_t(S)`` of the one-sided mixture against ``p = m`` (module docstring).

  Args:
    s: successes (broadcasts with ``t``).
    t: samples.
    m: the threshold, in (0, 1).
    agree_weight: the prior's weight ``w`` on ``q = 1``, in ``[0, 1)``.
  """
  s = np.asarray(s, np.float64)
  t = np.asarray(t, np.float64)
  a, b = s + 0.5, t - s + 0.5
  with np.errstate(divide="ignore"):
    tail = np.log(special.betaincc(a, b, m))
    z = math.log(special.betaincc(0.5, 0.5, m))
  kt = (
    special.betaln(a, b)
    + tail
    - special.betaln(0.5, 0.5)
    - z
    - s * math.log(m)
    - (t - s) * math.log1p(-m)
  )
  w = float(agree_weight)
  if w == 0.0:
    return kt
  agree = np.where(s == t, math.log(w) - t * math.log(m), -np.inf)
  with np.errstate(invalid="ignore"):  # both parts -inf (a zero probability): -inf
    return np.logaddexp(math.log1p(-w) + kt, agree)


@functools.lru_cache(maxsize=512)
def _thresholds(m: float, a: float, looks: tuple[int, ...], w: float) -> np.ndarray:
  t = np.asarray(looks, np.int64)
  if not 0.0 < m < 1.0:  # m >= 1: the level is out of reach
    return t + 1
  # A hair above log(1/a): float error can only make a threshold larger (conservative).
  target = -math.log(a) + 1e-9
  lo = np.zeros_like(t)  # M_t(lo - 1) < target (or lo = 0)
  hi = t + 1  # M_t(hi) >= target, or hi = t + 1 (none)
  while np.any(hi > lo):
    mid = (lo + hi) // 2
    ok = mixture_log_wealth(mid, t, m, w) >= target
    hi = np.where(ok & (hi > lo), mid, hi)
    lo = np.where(~ok & (hi > lo), mid + 1, lo)
  out = lo.copy()
  out.setflags(write=False)
  return out


def mixture_thresholds(
  m: float, a: float, looks: tuple[int, ...] | list[int], agree_weight: float = 0.0
) -> np.ndarray:
  """The integer thresholds ``c(n_k)`` of one level: ``[K]`` int64 (cached).

  ``S >= c(n_k)`` after ``n_k`` samples rejects ``p_A <= m`` at level ``a``,
  anytime-valid over all the looks together (Ville's inequality).

  Args:
    m: the level's probability threshold (``>= 1``: out of reach).
    a: the test's level.
    looks: ``[K]`` increasing sample counts.
    agree_weight: the prior's weight on ``q = 1`` (module docstring), in ``[0, 1)``.
  """
  w = float(agree_weight)
  if not 0.0 <= w < 1.0:
    raise ValueError(f"agree_weight must lie in [0, 1), got {agree_weight!r}")
  return _thresholds(float(m), float(a), tuple(int(n) for n in looks), w)


def level_probability(radius: Callable[[float], float], r: float) -> float:
  """The smallest float64 ``p`` in ``[1/2, 1]`` with ``radius(p) >= r`` (1.0 past reach).

  ``radius`` is increasing in ``p``; the result is exact to one ulp (bisection),
  so a bound ``p_A >= level_probability`` gives a radius ``>= r`` exactly.
  Returns ``inf`` when no ``p <= 1`` reaches ``r``.
  """
  if radius(0.5) >= r:
    return 0.5
  if not radius(1.0) >= r:
    return math.inf
  lo, hi = 0.5, 1.0
  while True:
    mid = 0.5 * (lo + hi)
    if mid <= lo or mid >= hi:
      return hi
    if radius(mid) >= r:
      hi = mid
    else:
      lo = mid


def nested_level(s: np.ndarray, c: np.ndarray) -> np.ndarray:
  """The highest level all of whose tests (and those of every level below) reject.

  Args:
    s: ``[m]`` successes.
    c: ``[m, L]`` thresholds of the ``L`` levels at each input's look.

  Returns:
    ``[m]`` int64 level, -1 where level 0's test does not reject.
  """
  ok = np.asarray(s)[:, None] >= np.asarray(c)
  return np.cumprod(ok, axis=1).sum(axis=1).astype(np.int64) - 1
