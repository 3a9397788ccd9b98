"""The checks of the ablation methods: ``rsjax verify``'s half of ``--method patch`` and
``--method ablation`` (NumPy and SciPy only).

* ``patch``: the run's details (ablation, size, the number of positions, the encoding, the
  votes) must be those its options and input shape give; each row's record must hold exact
  votes (no selection counts) of the number of positions (each voting once, or with a vote
  threshold each class at most once), of which the smoothed
  class, its share and the largest certified patch side are derived again
  (``rsjax.claims.patch_certificate``).
* ``ablation``: the details likewise (``keep``, the pixels, the encoding); each row's
  selection and estimation counts as Cohen's (``rsjax.claims.read_rows``), the
  Clopper-Pearson bound and the L0 radius derived again (``rsjax.claims.l0_certificate``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rsjax.claims import (
  Mismatch,
  Rows,
  compare,
  cp_lower,
  dense,
  l0_certificate,
  patch_certificate,
  patch_positions,
  read_rows,
)

__all__ = ["ENCODING", "check_l0", "check_patch"]

#: The encoding every ablation run states (the one rsjax draws with; ``_ablate.ENCODING``).
ENCODING = "levine-feizi: channels (x, 1 - x) at kept pixels, 0 in every channel at ablated ones"


#: ``details.tokens`` of a patch run whose ViT ran the kept tokens only (absent otherwise).
TOKENS_DROPPED = "dropped: only the patch tokens holding a kept pixel, and [CLS], through the ViT"


def _details_issues(cert: dict, want: dict) -> list[Mismatch]:
  """One mismatch when the run's details are not ``want`` (what its options give)."""
  have = cert.get("details") or {}
  if have != want:
    return [Mismatch(-1, f"the run's details {have} are not what its options give: {want}")]
  return []


def _patch_details(cert: dict) -> dict:
  """The details of a patch run, from its options and input shape."""
  s = cert["settings"]
  h, w = (int(d) for d in cert["input_shape"][:2])
  ablation, size = str(s["ablation"]), int(s["ablation_size"])
  threshold = s.get("vote_threshold")
  if threshold is not None and not (
    isinstance(threshold, (int, float)) and not isinstance(threshold, bool) and 0 < threshold <= 1
  ):
    raise TypeError(f"vote_threshold {threshold!r} is not a number in (0, 1]")
  out = {
    "ablation": ablation,
    "size": size,
    "positions": patch_positions(ablation, size, h, w),
    "encoding": ENCODING,
    "votes": "argmax" if threshold is None else f"softmax >= {float(threshold)!r}",
  }
  if s.get("drop_tokens"):
    out["tokens"] = TOKENS_DROPPED
  return out


def _vote_problem(counts: np.ndarray, n: object, positions: int, threshold) -> str | None:
  """Why one row's votes ``counts [C]`` are not those of ``positions`` regions, or None: each
  region votes once (argmax), or each class at most once a region (a threshold; above 1/2,
  at most one class a region)."""
  total, most = int(counts.sum()), int(counts.max(initial=0))
  once = threshold is None
  at_most_one = threshold is not None and float(threshold) > 0.5
  if n != positions or (once and total != positions) or most > positions:
    return (
      f"the record's votes ({total} in all, n {n!r}) are not those of {positions} positions "
      + ("each voting once" if once else "each voting at most once per class")
    )
  if at_most_one and total > positions:
    return f"{total} votes of {positions} positions at a threshold above 1/2 (one class each)"
  return None


def _patch_rows(res: Any, recs: dict, num_classes: int, want: dict, issues: list) -> tuple:
  """``(Rows, counts [b, C])`` of a patch run, its rows without exact votes reported."""
  positions, threshold = want["positions"], want["threshold"]
  b = len(res)
  rows = Rows(
    np.zeros(b, bool), np.zeros(b, np.int64), np.zeros(b, np.int64), np.zeros(b, np.int64),
    np.full(b, positions, np.int64), np.full(b, np.nan), np.full(b, np.nan),
  )  # fmt: skip
  counts = np.zeros((b, num_classes), np.int64)
  for j, idx in enumerate(res.idx.tolist()):
    r = recs.get(int(idx))
    why = None
    if r is None:
      why = "no certificate record for this row"
    elif r.get("counts0") is not None:
      why = "the record holds selection counts: a patch run's votes are exact, one pass"
    elif dense(r.get("counts"), num_classes, counts[j]) is None:
      why = "the record's votes are not counts of the run's classes"
    else:
      why = _vote_problem(counts[j], r.get("n"), positions, threshold)
    if why is not None:
      issues.append(Mismatch(int(idx), why))
      continue
    p = r.get("p_lower")
    rows.p_recorded[j] = float(p) if isinstance(p, (int, float)) else np.nan
    rows.valid[j] = True
  return rows, counts


def check_patch(
  cert: dict, res: Any, recs: dict, *, rtol: float, atol: float, **_: object
) -> list[Mismatch]:
  """Every row of a derandomized run derived again from its exact votes."""
  want = _patch_details(cert)
  issues = _details_issues(cert, want)
  if issues:
    return issues
  h, w = (int(d) for d in cert["input_shape"][:2])
  threshold = cert["settings"].get("vote_threshold")
  rows, counts = _patch_rows(
    res, recs, int(cert["num_classes"]), {**want, "threshold": threshold}, issues
  )
  predict, radius = patch_certificate(counts, want["ablation"], want["size"], h, w)
  at = np.arange(len(counts))
  rows.guess[:] = predict
  rows.n_a[:] = counts[at, predict] if len(counts) else 0
  share = rows.n_a / want["positions"]
  compare(res, rows, predict, radius, issues, rtol=rtol, atol=atol, p_lower=share)
  return issues


def check_l0(
  cert: dict, res: Any, recs: dict, *, rtol: float, atol: float, **_: object
) -> list[Mismatch]:
  """Every row of a randomized-ablation run derived again from its counts."""
  h, w = (int(d) for d in cert["input_shape"][:2])
  keep = int(cert["settings"]["keep"])
  want = {"keep": keep, "pixels": h * w, "encoding": ENCODING}
  issues = _details_issues(cert, want)
  if issues:
    return issues
  rows = read_rows(cert, res, recs, issues)
  p = cp_lower(rows.n_a, rows.n, rows.alpha)
  ok, radius = l0_certificate(p, h * w, keep)
  compare(res, rows, np.where(ok, rows.guess, -1), radius, issues, rtol=rtol, atol=atol, p_lower=p)
  return issues
