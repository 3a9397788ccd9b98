"""A run's rows and their recorded counts, read and checked against the run's settings."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from rsjax.verify._formulas import budget_alphas, budget_looks
from rsjax.verify._report import Mismatch, VerifyError


def dense(sparse, num_classes: int):
  """``{class: count}`` -> ``[C]`` int64, or None when a class is out of range."""
  out = np.zeros(num_classes, np.int64)
  for k, v in sparse.items():
    k = int(k)
    if not 0 <= k < num_classes or int(v) < 0:
      return None
    out[k] = int(v)
  return out


def budget_levels(cert: dict, n_max: int, alpha: float, issues: list) -> dict | None:
  """``{look: alpha_k}`` of a budgeted run, after checking its schedule spends at most alpha."""
  b = cert["budget"]
  looks = budget_looks(n_max, b["first"], b["ratio"])
  alphas = budget_alphas(alpha, len(looks), float(b["final_share"]))
  if [int(v) for v in b["looks"]] != looks:
    issues.append(Mismatch(-1, f"budgeted looks {b['looks']} are not the declared schedule "
                           f"{looks} (first {b['first']}, ratio {b['ratio']}, N {n_max})"))
    return None
  rec = np.asarray(b["alphas"], np.float64)
  if len(rec) != len(looks) or not np.allclose(rec, alphas, rtol=1e-12, atol=0):
    issues.append(Mismatch(-1, f"budgeted alpha levels {b['alphas']} are not the declared "
                           f"split {alphas} of alpha {alpha}"))
    return None
  if rec.sum() > alpha * (1 + 1e-12):
    issues.append(Mismatch(-1, f"budgeted alpha levels spend {rec.sum()} > alpha {alpha}"))
    return None
  return dict(zip(looks, alphas))


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


def run_sigma(cert: dict) -> float:
  sigma = cert["sigma"]
  if isinstance(sigma, str) or not (isinstance(sigma, (int, float)) and sigma > 0):
    raise VerifyError(f"{cert.get('method')} run with sigma {sigma!r}: expected a number > 0")
  return float(sigma)


def read_rows(cert: dict, res, recs: dict, issues: list, levels: dict | None = None) -> Rows:
  """Parses each row's counts, reporting rows whose record is missing or inconsistent."""
  s = cert["sampling"]
  n0, n_max, alpha = int(s["n0"]), int(s["n"]), float(s["alpha"])
  num_classes = int(cert["num_classes"])
  b = len(res)
  out = Rows(np.zeros(b, bool), np.zeros(b, np.int64), np.zeros(b, np.int64),
              np.zeros(b, np.int64), np.full(b, n_max, np.int64), np.full(b, alpha),
              np.full(b, np.nan))
  for j, idx in enumerate(res.idx):
    idx = int(idx)
    r = recs.get(idx)
    if r is None:
      issues.append(Mismatch(idx, "no certificate record for this row"))
      continue
    if r.get("counts0") is None or r.get("counts") is None:
      issues.append(Mismatch(idx, "the record holds no counts"))
      continue
    c0, c1 = dense(r["counts0"], num_classes), dense(r["counts"], num_classes)
    if c0 is None or c1 is None:
      issues.append(Mismatch(idx, f"recorded counts name a class outside 0..{num_classes - 1} "
                             "or are negative"))
      continue
    used = int(r.get("n") if r.get("n") is not None else n_max)
    if levels is not None:
      if used not in levels:
        issues.append(Mismatch(idx, f"{used} estimation samples is not one of the budgeted "
                               f"looks {sorted(levels)}"))
        continue
      out.alpha[j] = levels[used]
    elif used != n_max:
      issues.append(Mismatch(idx, f"{used} estimation samples recorded, the run has N={n_max}"))
      continue
    if c0.sum() != n0:
      issues.append(Mismatch(idx, f"selection counts sum to {c0.sum()}, N0 is {n0}"))
      continue
    if c1.sum() != used:
      issues.append(Mismatch(idx, f"estimation counts sum to {c1.sum()}, N is {used}"))
      continue
    g = int(np.argmax(c0))
    p_rec = r.get("p_lower")
    if p_rec is not None:
      try:
        out.p_recorded[j] = float(p_rec)
      except (TypeError, ValueError):
        issues.append(Mismatch(idx, f"recorded p_lower {p_rec!r} is not a number"))
        continue
    out.guess[j], out.n_a[j], out.n[j] = g, c1[g], used
    out.runner_up[j] = np.delete(c1, g).max() if num_classes > 1 else 0
    out.valid[j] = True
  return out


def compare(res, rows: Rows, predict, radius, issues: list, *, rtol: float, atol: float,
            columns: tuple[str, str] = ("predict", "radius"), p_lower=None) -> None:
  """Reports valid rows whose prediction or radius in the file differs from the recomputation.

  Args:
    res: the result file's rows (``rsjax.io.read_certify``).
    rows: their parsed counts.
    predict: ``[b]`` recomputed predictions.
    radius: ``[b]`` recomputed radii.
    issues: where the mismatches go.
    rtol, atol: tolerances of the radii.
    columns: the file's columns holding the prediction and the radius.
    p_lower: ``[b]`` recomputed lower bounds, compared with the recorded ones
      (to ``rtol``, ``atol``), or None.
  """
  got_p, got_r = (np.asarray(getattr(res, c) if c in ("predict", "radius") else res.extra[c])
                  for c in columns)
  for j in np.flatnonzero(rows.valid):
    idx = int(res.idx[j])
    if p_lower is not None and not (np.isnan(rows.p_recorded[j]) or math.isclose(
        float(rows.p_recorded[j]), float(p_lower[j]), rel_tol=rtol, abs_tol=atol)):
      issues.append(Mismatch(idx, f"p_lower {float(rows.p_recorded[j])!r} recorded, the counts "
                             f"give {float(p_lower[j])!r} (n_A {rows.n_a[j]} of {rows.n[j]})"))
    elif int(got_p[j]) != predict[j]:
      issues.append(Mismatch(idx, f"{columns[0]} {got_p[j]} in the file, the counts give "
                             f"{predict[j]} (n_A {rows.n_a[j]} of {rows.n[j]})"))
    elif not math.isclose(float(got_r[j]), radius[j], rel_tol=rtol, abs_tol=atol):
      issues.append(Mismatch(idx, f"{columns[1]} {float(got_r[j])!r} in the file, the counts give "
                             f"{float(radius[j])!r} (n_A {rows.n_a[j]} of {rows.n[j]}, "
                             f"alpha {rows.alpha[j]:g})"))
