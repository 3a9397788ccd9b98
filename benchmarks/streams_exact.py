"""Exact error of a stopping rule's tests: a forward recursion over the count distribution.

A rule that certifies a grid level when the top-class count after ``n_k``
samples reaches a threshold ``c(n_k)`` at one of its looks (or, at the last
look, a second threshold: Cohen's Clopper-Pearson look) certifies it wrongly,
at ``p_A`` on the level's threshold, with probability at most that of the
count *ever* reaching a threshold on the uninterrupted stream: stopping early
only removes chances. :func:`crossing_probability` computes that probability
exactly (up to float64 rounding of the convolutions) by carrying the
distribution of the count over the looks, with the mass that has crossed
removed at each look.
"""

from __future__ import annotations

import numpy as np
from scipy import signal
from scipy import stats as st

__all__ = ["crossing_probability"]


def crossing_probability(
  p: float, looks: np.ndarray, thresholds: np.ndarray, final: int | None = None
) -> float:
  """``P(exists k: S(n_k) >= thresholds[k], or S(n_K) >= final)`` for i.i.d. Bernoulli(p).

  Args:
    p: success probability.
    looks: ``[K]`` increasing sample counts.
    thresholds: ``[K]`` crossing counts (``> n_k``: no crossing at look k).
    final: an extra crossing count at the last look, or None.
  """
  dist = np.ones(1)
  crossed, n = 0.0, 0
  for k, n_k in enumerate(np.asarray(looks, np.int64)):
    d = int(n_k) - n
    step = st.binom.pmf(np.arange(d + 1), d, p)
    if len(dist) * len(step) > 4_000_000:
      dist = np.clip(signal.fftconvolve(dist, step), 0.0, None)
    else:
      dist = np.convolve(dist, step)
    n = int(n_k)
    c = int(thresholds[k])
    if k + 1 == len(looks) and final is not None:
      c = min(c, int(final))
    if c <= n:
      crossed += float(dist[c:].sum())
      dist[c:] = 0.0
  return crossed
