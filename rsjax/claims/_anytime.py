"""The check of budgeted CERTIFY's ``Anytime`` rule: each row's level again from its counts."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from rsjax.claims._formulas import (
  P_LOWER_MARGIN,
  binary_radius,
  cp_lower,
  directed,
  round_down,
  split_alpha,
)
from rsjax.claims._mismatch import Mismatch
from rsjax.claims._mixture import (
  anytime_looks,
  level_probability,
  mixture_thresholds,
  nested_level,
)
from rsjax.claims._rows import Rows
from rsjax.claims._stopping import (
  anytime_need,
  anytime_stop,
  level_words,
  record_stop_alpha,
  stop_mismatches,
  stop_quantile,
)

if TYPE_CHECKING:
  from rsjax.records.io import CertifyResults

#: The rule's name in a run's record (``rsjax.engine.anytime.RULE``).
ANYTIME_RULE = "anytime-kt-mixture"


#: The mixture's share of alpha in records written before the share was a field.
_SHARE_BEFORE_THE_FIELD = 0.5


#: The mixture prior's weight on ``q = 1`` in records written before the weight was a field.
_AGREE_WEIGHT_BEFORE_THE_FIELD = 0.0


def mixture_share(budget: dict) -> float:
  """The run's share of alpha for the mixture tests (records before the field: 1/2)."""
  return float(budget.get("mixture_share", _SHARE_BEFORE_THE_FIELD))


def agree_weight(budget: dict) -> float:
  """The run's prior weight on ``q = 1`` (records before the field: 0, the plain KT mixture)."""
  return float(budget.get("agree_weight", _AGREE_WEIGHT_BEFORE_THE_FIELD))


def anytime_levels(
  cert: dict, n_max: int, alpha: float, issues: list[Mismatch]
) -> dict[int, float] | None:
  """``{look: Clopper-Pearson level}`` of an anytime run, after checking its declared schedule."""
  b = cert["budget"]
  first, ratio = b.get("first"), b.get("ratio")
  share = b.get("mixture_share", _SHARE_BEFORE_THE_FIELD)
  if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share < 1:
    issues.append(Mismatch(-1, f"anytime mixture_share {share!r} is not in (0, 1)"))
    return None
  w = b.get("agree_weight", _AGREE_WEIGHT_BEFORE_THE_FIELD)
  if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < 1:
    issues.append(Mismatch(-1, f"anytime agree_weight {w!r} is not in [0, 1)"))
    return None
  if not (
    isinstance(first, int)
    and not isinstance(first, bool)
    and first >= 1
    and isinstance(ratio, (int, float))
    and ratio > 1
  ):
    issues.append(Mismatch(-1, f"anytime schedule first {first!r}, ratio {ratio!r} is not one"))
    return None
  cp_alpha = split_alpha(alpha, mixture_share(b))[1]
  return {n: cp_alpha for n in anytime_looks(n_max, first, float(ratio))}


def thresholds_digest(looks: Sequence[int], c: np.ndarray) -> str:
  """``"sha256:<hex>"`` of an anytime run's integer thresholds (the run record names it).

  Args:
    looks: ``[K]`` the looks.
    c: ``[K, L]`` the mixture threshold of level ``j`` at look ``k``.
  """
  h = hashlib.sha256(np.asarray(looks, "<i8").tobytes())
  h.update(np.ascontiguousarray(np.asarray(c), dtype="<i8").tobytes())
  return "sha256:" + h.hexdigest()


def _tables(cert: dict, scale: float) -> tuple[list[int], np.ndarray, np.ndarray, float]:
  """``(looks [K], m [L], c [K, L], mixture alpha)`` of an anytime run, from its record."""
  s = cert["sampling"]
  n_max, alpha = int(s["n"]), float(s["alpha"])
  b = cert["budget"]
  grid = [float(r) for r in b["grid"]]
  if not grid or grid[0] != 0.0:
    grid = [0.0, *grid]
  dim = int(np.prod(cert["input_shape"]))
  looks = anytime_looks(n_max, int(b["first"]), float(b["ratio"]))
  ms = np.asarray(
    [
      level_probability(lambda p: float(binary_radius(np.float64(p), scale, cert["noise"], dim)), r)
      for r in grid
    ]
  )
  a_mix = split_alpha(alpha, mixture_share(b))[0]
  w = agree_weight(b)
  c = np.stack([mixture_thresholds(m, a_mix, looks, w) for m in ms], axis=1)  # [K, L]
  return looks, ms, c, a_mix


def anytime_table_issues(cert: dict, scale: float) -> list[Mismatch]:
  """The thresholds computed here against the digest the run recorded (records before
  the digest: nothing to compare). A difference means this machine derives other
  integer thresholds than the run used (another SciPy's rounding, another rule)."""
  want = cert["budget"].get("thresholds")
  if want is None:
    if cert.get("bound", False):  # every rsjax-run/3 record states it
      return [Mismatch(-1, "the anytime run records no thresholds digest")]
    return []
  looks, _, c, _ = _tables(cert, scale)
  got = thresholds_digest(looks, c)
  if got != want:
    return [Mismatch(-1, f"the run records the anytime thresholds {want!r}; they are {got!r} here")]
  return []


def anytime_certificate(
  cert: dict, rows: Rows, scale: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """``(prediction [b], radius [b], p_lower [b])`` of every row of an anytime run.

  The level at a row's look is the highest grid level whose mixture test (and
  every lower level's) rejects at ``s alpha`` (``s`` the run's ``mixture_share``,
  the prior's weight on ``q = 1`` its ``agree_weight``),
  ``p_lower`` its threshold ``m_j`` (0 when none); at ``n_max`` the larger of
  that and the Clopper-Pearson bound at the rest of alpha (``rsjax.engine.anytime``).
  """
  s = cert["sampling"]
  n_max, alpha = int(s["n"]), float(s["alpha"])
  looks, ms, c, a_mix = _tables(cert, scale)
  dim = int(np.prod(cert["input_shape"]))
  pos = {n: k for k, n in enumerate(looks)}
  at = np.asarray([pos.get(int(n), len(looks) - 1) for n in rows.n])
  lvl = nested_level(rows.n_a, c[at])
  p = np.where(lvl >= 0, ms[np.maximum(lvl, 0)], 0.0)
  final = rows.n == n_max
  cp = cp_lower(rows.n_a, rows.n, split_alpha(alpha, mixture_share(cert["budget"]))[1])
  if directed(cert.get("noise", {})):  # rounded down as the engine does (P_LOWER_MARGIN)
    cp = round_down(cp, P_LOWER_MARGIN)
  p = np.where(final, np.maximum(p, cp), p)
  ok = p >= 0.5
  radius = np.where(ok, binary_radius(p, scale, cert["noise"], dim), 0.0)
  return np.where(ok, rows.guess, -1), radius, p


def anytime_stop_issues(
  cert: dict, res: CertifyResults, rows: Rows, scale: float
) -> list[Mismatch]:
  """The rows of an anytime run that stopped before ``N`` where the rule does not stop.

  A row's recorded counts are its counts at the look it stopped at, so the rule's
  decision there (``rsjax.claims.anytime_stop``, the engine's) follows from them; the
  earlier looks' counts are not recorded (the audit draws them again).
  """
  issues: list[Mismatch] = []
  stop_alpha = record_stop_alpha(cert["budget"], issues)
  if stop_alpha is None:
    return issues
  n_max, alpha = int(cert["sampling"]["n"]), float(cert["sampling"]["alpha"])
  looks, ms, c, _ = _tables(cert, scale)
  cp_alpha = split_alpha(alpha, mixture_share(cert["budget"]))[1]
  need = anytime_need(c[-1], ms, n_max, cp_alpha)
  z_stop = stop_quantile(stop_alpha)

  def decide(s: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    lvl = nested_level(s, c[k][None, :])
    return lvl, anytime_stop(
      s, lvl, np.broadcast_to(need, (len(s), len(need))), looks[k], n_max, z_stop
    )

  def why(lvl: int) -> str:
    return (
      f"it certifies {level_words(lvl)} there, below the grid's top, and grid level "
      f"{lvl + 1} is still within reach by N={n_max:,} (the anytime rule's futility test "
      f"at stop_alpha {stop_alpha:g})"
    )

  return stop_mismatches(res, rows, looks, decide, why)
