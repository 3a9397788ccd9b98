"""The certificate rules of the two ablation methods, from their counts (host, exact).

* Derandomized smoothing (Levine and Feizi, NeurIPS 2020, Theorem 1 and its tie rule): the
  smoothed class is the most voted one, ties to the smaller class index. An ``m x m`` patch
  meets at most ``Delta(m)`` kept regions (``m + s - 1`` bands of width ``s``, at most the
  ``P`` there are; ``(m + s - 1)^2`` blocks of side ``s``, each side at most the image's), so
  it moves at most ``Delta`` votes away from the class and ``Delta`` to another: the class
  ``c`` holds against it when ``n_c - n_c' > 2 Delta`` for every other ``c'``, or ``= 2
  Delta`` where ``c < c'`` (the tie is then broken toward ``c``). The radius is the largest
  ``m`` (at most the image's smaller side) for which it holds; 0 where it holds for none.
* Randomized ablation (Levine and Feizi, AAAI 2020, Theorem 1): ``k`` of the ``d`` pixels
  kept; a change of ``rho`` pixels is kept by an ablation with probability at most
  ``Delta = 1 - C(d - rho, k) / C(d, k)``, so the class whose probability is at least
  ``p_lower`` (Clopper-Pearson, level ``alpha``) holds when ``p_lower - Delta > 1/2``. The
  radius is the largest such ``rho`` (compared in exact rational arithmetic); where
  ``p_lower <= 1/2`` the smoothed classifier abstains.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

__all__ = ["l0_radius", "patch_delta", "patch_radius", "smoothed_class"]


def patch_delta(m: int, ablation: str, size: int, shape: tuple[int, ...]) -> int:
  """``Delta(m)``: the most kept regions an ``m x m`` patch meets."""
  h, w = int(shape[0]), int(shape[1])
  reach = m + size - 1
  if ablation == "column":
    return min(reach, w)
  if ablation == "row":
    return min(reach, h)
  if ablation == "block":
    return min(reach, h) * min(reach, w)
  raise ValueError(f"ablation must be 'column', 'row' or 'block', got {ablation!r}")


def smoothed_class(counts: np.ndarray) -> np.ndarray:
  """``[B]``: the most voted class of ``counts [B, C]``, ties to the smaller index."""
  return np.argmax(np.asarray(counts), axis=1)


def _holds(counts: np.ndarray, c: int, delta: int) -> bool:
  """Whether class ``c`` of one image's ``counts [C]`` holds against ``delta`` moved votes."""
  gap = int(counts[c]) - np.delete(counts, c).astype(np.int64)
  others = np.delete(np.arange(len(counts)), c)
  return bool(np.all((gap > 2 * delta) | ((gap == 2 * delta) & (c < others))))


def patch_radius(
  counts: np.ndarray, ablation: str, size: int, shape: tuple[int, ...]
) -> np.ndarray:
  """``[B]`` int: the largest patch side certified for each image of ``counts [B, C]``."""
  counts = np.asarray(counts, np.int64)
  top = smoothed_class(counts)
  most = min(int(shape[0]), int(shape[1]))
  out = np.zeros(len(counts), np.int64)
  for b in range(len(counts)):
    lo, hi = 0, most  # holds at lo (0: vacuous); find the largest m that holds
    while lo < hi:
      mid = (lo + hi + 1) // 2
      if _holds(counts[b], int(top[b]), patch_delta(mid, ablation, size, shape)):
        lo = mid
      else:
        hi = mid - 1
    out[b] = lo
  return out


def _kept_share(d: int, k: int, rho: int) -> Fraction:
  """``C(d - rho, k) / C(d, k)``: the chance that an ablation keeps none of ``rho`` pixels."""
  return Fraction(math.comb(d - rho, k), math.comb(d, k))


def l0_radius(p_lower: np.ndarray, d: int, k: int) -> np.ndarray:
  """``[B]`` int: the largest ``rho`` with ``p_lower - Delta(rho) > 1/2``; -1 where
  ``p_lower <= 1/2`` (no radius: abstain)."""
  out = np.full(len(p_lower), -1, np.int64)
  for b, p in enumerate(np.asarray(p_lower, np.float64)):
    need = Fraction(3, 2) - Fraction(float(p))  # holds iff kept share > 3/2 - p_lower
    if not _kept_share(d, k, 0) > need:
      continue
    lo, hi = 0, d - k
    while lo < hi:
      mid = (lo + hi + 1) // 2
      if _kept_share(d, k, mid) > need:
        lo = mid
      else:
        hi = mid - 1
    out[b] = lo
  return out
