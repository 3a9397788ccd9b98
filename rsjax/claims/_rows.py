"""A run's rows and their recorded counts, read and checked against the run's settings."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import numpy as np

from rsjax.claims._formulas import (
  P_LOWER_MARGIN,
  binary_radius,
  budget_alphas,
  budget_looks,
  cp_lower,
  directed,
  multiclass,
  round_down,
)
from rsjax.claims._mismatch import Mismatch, VerifyError
from rsjax.records.limits import MAX_SAMPLES, class_key, shown

if TYPE_CHECKING:
  from rsjax.records.io import CertifyResults


def _is_count(v: object) -> bool:
  """A JSON integer in ``0..rsjax.runs.limits.MAX_SAMPLES`` (it fits the int64 arrays)."""
  return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_SAMPLES


def dense(sparse: object, num_classes: int, out: np.ndarray | None = None) -> np.ndarray | None:
  """``{class: count}`` -> ``[C]`` int64 (into ``out`` if given), or None when a class is
  not written in ASCII digits without leading zeros (``rsjax.records.limits.class_key``), is out of
  range, or a count is not an integer in ``0..rsjax.runs.limits.MAX_SAMPLES``."""
  out = np.zeros(num_classes, np.int64) if out is None else out
  if not isinstance(sparse, dict):
    return None
  for k, v in sparse.items():
    c = class_key(k, num_classes)
    if c is None or not _is_count(v):
      return None
    out[c] = v
  return out


def budget_levels(
  cert: dict, n_max: int, alpha: float, issues: list[Mismatch]
) -> dict[int, float] | None:
  """``{look: alpha_k}`` of a budgeted run, after checking its schedule spends at most alpha."""
  b = cert["budget"]
  first, ratio, share = b.get("first"), b.get("ratio"), b.get("final_share")
  if not (
    isinstance(first, int)
    and first >= 1
    and isinstance(ratio, (int, float))
    and ratio > 1
    and isinstance(share, (int, float))
    and 0 < share <= 1
  ):
    issues.append(
      Mismatch(
        -1,
        f"budgeted schedule first {first!r}, ratio {ratio!r}, final share "
        f"{share!r} is not one (first >= 1, ratio > 1, 0 < share <= 1)",
      )
    )
    return None
  looks = budget_looks(n_max, b["first"], b["ratio"])
  alphas = budget_alphas(alpha, len(looks), float(b["final_share"]))
  if [int(v) for v in b["looks"]] != looks:
    issues.append(
      Mismatch(
        -1,
        f"budgeted looks {b['looks']} are not the declared schedule "
        f"{looks} (first {b['first']}, ratio {b['ratio']}, N {n_max})",
      )
    )
    return None
  rec = np.asarray(b["alphas"], np.float64)
  if len(rec) != len(looks) or not np.allclose(rec, alphas, rtol=1e-12, atol=0):
    issues.append(
      Mismatch(
        -1,
        f"budgeted alpha levels {b['alphas']} are not the declared split {alphas} of alpha {alpha}",
      )
    )
    return None
  if not np.all(rec > 0) or rec.sum() > alpha * (1 + 1e-12):
    issues.append(
      Mismatch(
        -1, f"budgeted alpha levels {list(rec)} are not > 0 or spend {rec.sum()} > alpha {alpha}"
      )
    )
    return None
  return dict(zip(looks, alphas, strict=True))


@dataclasses.dataclass
class Rows:
  """The counts of the rows of a run, checked against its settings.

  Attributes:
    valid: ``[b]`` rows whose record is complete and consistent.
    guess, n_a, runner_up, n: ``[b]`` the selected class, its estimation count,
      the largest other count, the estimation samples.
    alpha: ``[b]`` the level of each row's bound.
    p_recorded: ``[b]`` the recorded lower bound ``p_lower`` (NaN where none).
  """

  valid: np.ndarray
  guess: np.ndarray
  n_a: np.ndarray
  runner_up: np.ndarray
  n: np.ndarray
  alpha: np.ndarray
  p_recorded: np.ndarray


def drawn_sigma(sigma: float) -> float:
  """The sigma the engine draws its noise at and takes its radii at: ``float32(sigma)``
  (0.11999999731779099 for 0.12; ``sigma`` itself where float32 holds it exactly)."""
  return float(np.float32(sigma))


def run_sigma(cert: dict) -> float:
  """The run's sigma as its noise was drawn (``drawn_sigma``), refused unless a number > 0."""
  sigma = cert["sigma"]
  if isinstance(sigma, str) or not (isinstance(sigma, (int, float)) and sigma > 0):
    raise VerifyError(f"{cert.get('method')} run with sigma {sigma!r}: expected a number > 0")
  return drawn_sigma(sigma)


def read_rows(
  cert: dict,
  res: CertifyResults,
  recs: dict[int, dict],
  issues: list[Mismatch],
  levels: dict[int, float] | None = None,
) -> Rows:
  """Parses each row's counts, reporting rows whose record is missing or inconsistent.

  Args:
    cert: the run's certificate view (``sampling``, ``num_classes``, ``noise``).
    res: the result file's ``b`` rows (``rsjax.records.io.read_certify``).
    recs: ``{idx: record}`` of the certificate records.
    issues: where a row whose record is missing or inconsistent goes.
    levels: ``{look: alpha_k}`` of a budgeted run (``budget_levels``), or None.

  Returns:
    The :class:`Rows` (``[b]`` each); the rows reported are not ``valid``.
  """
  s = cert["sampling"]
  n0, n_max, alpha = int(s["n0"]), int(s["n"]), float(s["alpha"])
  num_classes = int(cert["num_classes"])
  b = len(res)
  out = Rows(
    np.zeros(b, bool),
    np.zeros(b, np.int64),
    np.zeros(b, np.int64),
    np.zeros(b, np.int64),
    np.full(b, n_max, np.int64),
    np.full(b, alpha),
    np.full(b, np.nan),
  )
  c0s = np.zeros((b, num_classes), np.int64)
  c1s = np.zeros((b, num_classes), np.int64)
  why: dict[int, str] = {}
  for j, idx in enumerate(res.idx):
    problem = _read_row(recs.get(int(idx)), j, out, c0s[j], c1s[j], n_max, levels)
    if problem is not None:
      why[j] = problem
  why.update(_sum_problems(cert, n0, out, c0s, c1s))
  for j in sorted(why):
    out.valid[j] = False
    issues.append(Mismatch(int(res.idx[j]), why[j]))
  _select(out, c0s, c1s)
  return out


def _read_row(
  r: dict | None,
  j: int,
  out: Rows,
  c0: np.ndarray,
  c1: np.ndarray,
  n_max: int,
  levels: dict[int, float] | None,
) -> str | None:
  """Reads row ``j``'s record ``r`` into ``out`` and its counts into ``c0``, ``c1``.

  Args:
    r: the row's certificate record, or None where it has none.
    j: the row's position in the file.
    out: the rows read so far; row ``j``'s ``alpha``, ``p_recorded``, ``n`` and
      ``valid`` are set here.
    c0, c1: ``[C]`` the row's selection and estimation counts, filled here.
    n_max: the run's N.
    levels: ``{look: alpha_k}`` of a budgeted run, or None.

  Returns:
    Why the record is missing or inconsistent, or None when row ``j`` is valid.
  """
  if r is None:
    return "no certificate record for this row"
  if r.get("counts0") is None or r.get("counts") is None:
    return "the record holds no counts"
  num_classes = len(c0)
  if dense(r["counts0"], num_classes, c0) is None or dense(r["counts"], num_classes, c1) is None:
    return (
      f"recorded counts name a class outside 0..{num_classes - 1} (in ASCII digits) or "
      f"are not integers in 0..{MAX_SAMPLES}"
    )
  used = r.get("n", n_max) if r.get("n") is not None else n_max
  if not _is_count(used):
    return f"recorded samples {shown(used)} is not an integer in 0..{MAX_SAMPLES}"
  if levels is not None:
    if used not in levels:
      return f"{used} estimation samples is not one of the budgeted looks {sorted(levels)}"
    out.alpha[j] = levels[used]
  elif used != n_max:
    return f"{used} estimation samples recorded, the run has N={n_max}"
  p_rec = r.get("p_lower")
  if p_rec is not None:
    if not (
      isinstance(p_rec, (int, float)) and not isinstance(p_rec, bool) and 0.0 <= p_rec <= 1.0
    ):
      return f"recorded p_lower {p_rec!r} is not a number in [0, 1]"
    out.p_recorded[j] = float(p_rec)
  out.n[j] = used
  out.valid[j] = True
  return None


def _sum_problems(
  cert: dict, n0: int, out: Rows, c0s: np.ndarray, c1s: np.ndarray
) -> dict[int, str]:
  """``{j: why}`` of the valid rows whose ``[b, C]`` selection counts ``c0s`` do not sum
  to ``n0`` or estimation counts ``c1s`` to their ``out.n`` (with the sound 8-bit noise:
  sum to more)."""
  s0, s1 = c0s.sum(axis=1), c1s.sum(axis=1)
  # Sound 8-bit noise: an invalid draw counts for no class, so counts may sum to less.
  short = cert.get("noise", {}).get("name") == "gaussian_8bit"
  bad0 = (s0 > n0) if short else (s0 != n0)
  bad1 = (s1 > out.n) if short else (s1 != out.n)
  why = {
    j: f"selection counts sum to {s0[j]}, N0 is {n0}"
    for j in np.flatnonzero(out.valid & bad0).tolist()
  }
  for j in np.flatnonzero(out.valid & ~bad0 & bad1).tolist():
    why[j] = f"estimation counts sum to {s1[j]}, N is {out.n[j]}"
  return why


def _select(out: Rows, c0s: np.ndarray, c1s: np.ndarray) -> None:
  """Sets ``out.guess`` (the largest of ``[b, C]`` selection counts ``c0s``), its
  estimation count ``out.n_a`` and the largest other one ``out.runner_up`` (of ``c1s``)."""
  num_classes = c0s.shape[1]
  rows = np.arange(len(c0s))
  out.guess[:] = np.argmax(c0s, axis=1) if num_classes else 0
  out.n_a[:] = c1s[rows, out.guess]
  if num_classes > 1:
    others = c1s.copy()
    others[rows, out.guess] = -1
    out.runner_up[:] = others.max(axis=1)


def compare(
  res: CertifyResults,
  rows: Rows,
  predict: np.ndarray,
  radius: np.ndarray,
  issues: list[Mismatch],
  *,
  rtol: float,
  atol: float,
  columns: tuple[str, str] = ("predict", "radius"),
  p_lower: np.ndarray | None = None,
) -> None:
  """Reports valid rows whose prediction or radius in the file differs from the recomputation.

  Args:
    res: the result file's rows (``rsjax.records.io.read_certify``).
    rows: their parsed counts.
    predict: ``[b]`` recomputed predictions.
    radius: ``[b]`` recomputed radii.
    issues: where the mismatches go.
    rtol, atol: tolerances of the radii.
    columns: the file's columns holding the prediction and the radius.
    p_lower: ``[b]`` recomputed lower bounds, compared with the recorded ones
      (to ``rtol``, ``atol``), or None.
  """
  got_p, got_r = (
    np.asarray(getattr(res, c) if c in ("predict", "radius") else res.extra[c]) for c in columns
  )
  for j in np.flatnonzero(rows.valid):
    idx = int(res.idx[j])
    if p_lower is not None and not (
      np.isnan(rows.p_recorded[j])
      or math.isclose(float(rows.p_recorded[j]), float(p_lower[j]), rel_tol=rtol, abs_tol=atol)
    ):
      issues.append(
        Mismatch(
          idx,
          f"p_lower {float(rows.p_recorded[j])!r} recorded, the counts "
          f"give {float(p_lower[j])!r} (n_A {rows.n_a[j]} of {rows.n[j]})",
        )
      )
    elif int(got_p[j]) != predict[j]:
      issues.append(
        Mismatch(
          idx,
          f"{columns[0]} {got_p[j]} in the file, the counts give "
          f"{predict[j]} (n_A {rows.n_a[j]} of {rows.n[j]})",
        )
      )
    elif not math.isclose(float(got_r[j]), radius[j], rel_tol=rtol, abs_tol=atol):
      issues.append(
        Mismatch(
          idx,
          f"{columns[1]} {float(got_r[j])!r} in the file, the counts give "
          f"{float(radius[j])!r} (n_A {rows.n_a[j]} of {rows.n[j]}, "
          f"alpha {rows.alpha[j]:g})",
        )
      )


def cohen_certificate(
  cert: dict, rows: Rows, scale: float | np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Cohen's ``(prediction [b], radius [b], p_lower [b])`` of every row at noise ``scale``
  (a float or ``[b]``)."""
  if cert.get("multiclass") and cert.get("noise", {}).get("name") == "gaussian_8bit":
    # Counts short of N (invalid 8-bit draws) bound no runner-up from above; the engine
    # refuses this combination, so a record of it was not written by rsjax.
    raise VerifyError("a multiclass record with the sound 8-bit noise: rsjax never certifies it")
  if cert.get("multiclass"):
    ok, radius = multiclass(
      rows.n_a, rows.runner_up, rows.n, rows.alpha, int(cert["num_classes"]), scale
    )
    p = cp_lower(rows.n_a, rows.n, rows.alpha / 2)
  else:
    p = cp_lower(rows.n_a, rows.n, rows.alpha)
    if directed(cert.get("noise", {})):  # rounded down as the engine does (P_LOWER_MARGIN)
      p = round_down(p, P_LOWER_MARGIN)
    ok = p >= 0.5
    radius = np.where(
      ok, binary_radius(p, scale, cert["noise"], int(np.prod(cert["input_shape"]))), 0.0
    )
  return np.where(ok, rows.guess, -1), radius, p
