"""The certificates of the ablation methods written out again for ``rsjax verify`` (NumPy and the
standard library: exact integers and fractions).

* Derandomized smoothing (Levine and Feizi, NeurIPS 2020): ``patch_reach`` (how many kept
  regions an ``m x m`` patch meets), ``patch_certificate`` (the smoothed class, ties to the
  smaller index, and the largest patch side ``m`` at which every other class ``c'`` trails by
  more than ``2 Delta(m)`` votes, or by exactly ``2 Delta(m)`` with ``c < c'``).
* Randomized ablation (Levine and Feizi, AAAI 2020): ``l0_certificate`` (the largest ``rho``
  with ``p_lower - (1 - C(d - rho, k) / C(d, k)) > 1/2``, scanned upward with the ratio of
  consecutive binomials, ``C(d - rho - 1, k) / C(d - rho, k) = (d - rho - k) / (d - rho)``).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

__all__ = ["l0_certificate", "patch_certificate", "patch_positions", "patch_reach"]


def patch_positions(ablation: str, size: int, height: int, width: int) -> int:
  """How many kept regions there are: a band per column or row, a block per pixel."""
  del size  # the regions wrap around the image: one per start, whatever their size
  return {"column": width, "row": height, "block": height * width}[ablation]


def patch_reach(ablation: str, size: int, m: int, height: int, width: int) -> int:
  """``Delta(m)``: the kept regions an ``m x m`` patch can meet (at most all of them)."""
  across = size + m - 1
  if ablation == "column":
    return min(across, width)
  if ablation == "row":
    return min(across, height)
  return min(across, height) * min(across, width)


def _certified_side(votes: list[int], c: int, ablation: str, size: int, h: int, w: int) -> int:
  """The largest side ``m`` (0 to ``min(h, w)``) the class ``c`` of ``votes`` holds against."""
  best = 0
  for m in range(1, min(h, w) + 1):
    twice = 2 * patch_reach(ablation, size, m, h, w)
    for other, v in enumerate(votes):
      if other == c:
        continue
      lead = votes[c] - v
      if lead < twice or (lead == twice and other < c):
        return best
    best = m
  return best


def patch_certificate(
  counts: np.ndarray, ablation: str, size: int, height: int, width: int
) -> tuple[np.ndarray, np.ndarray]:
  """``(prediction [b], radius [b])`` of the exact votes ``counts [b, C]``."""
  predict = np.zeros(len(counts), np.int64)
  radius = np.zeros(len(counts), np.float64)
  for j, row in enumerate(np.asarray(counts, np.int64).tolist()):
    c = max(range(len(row)), key=lambda k: (row[k], -k))  # most votes, then smaller index
    predict[j] = c
    radius[j] = _certified_side(row, c, ablation, size, height, width)
  return predict, radius


def l0_certificate(p_lower: np.ndarray, pixels: int, keep: int) -> tuple[np.ndarray, np.ndarray]:
  """``(certified [b] bool, radius [b])``: where ``p_lower > 1/2``, and the largest number of
  changed pixels certified there (0 elsewhere)."""
  ok = np.zeros(len(p_lower), bool)
  radius = np.zeros(len(p_lower), np.float64)
  for j, p in enumerate(np.asarray(p_lower, np.float64).tolist()):
    margin = Fraction(p) - Fraction(1, 2)  # p_lower - 1/2 must exceed Delta(rho)
    if margin <= 0:
      continue
    ok[j] = True
    kept_none = Fraction(1)  # C(d - rho, k) / C(d, k) at rho = 0
    rho = 0
    while rho + 1 <= pixels - keep:
      nxt = kept_none * Fraction(pixels - rho - keep, pixels - rho)
      if not (1 - nxt) < margin:
        break
      kept_none, rho = nxt, rho + 1
    radius[j] = rho
  return ok, radius
