"""``rsjax verify``: recompute every prediction and radius of a certify run from its counts.

A certify run keeps its certificate record (``rsjax.record``): the run-wide
settings in ``<file>.run.json`` (entry ``"certificate"``) and the counts of each
row in ``<file>.cert.jsonl``. :func:`verify` recomputes, for every row of the
TSV, the prediction and the radius from the recorded counts with NumPy and
SciPy only (no model, no JAX, no device), by the formulas written out again
here (not by calling the code that produced them), and reports each row where
they differ from the file, or where the record itself is inconsistent (counts
that do not sum to N0 / N, a row without a record, a ``correct`` column that
does not follow from ``predict`` and ``label``, a budgeted run whose looks or
alpha levels are not the declared schedule or spend more than alpha).

Methods: ``cohen`` (binary radius of Gaussian / Laplace / uniform noise, the
multiclass radius with simultaneous bounds, and budgeted runs with their alpha
spending). Runs of other methods are reported as not verifiable, never as
verified.

Tolerances: predictions and counts are compared exactly; radii to a relative
``rtol`` (default 1e-9) plus ``atol`` 1e-12 (both sides are float64 from the
same SciPy special functions, so they agree to the last bits in practice).
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
from scipy import stats as st

from rsjax import io
from rsjax import record as record_lib

__all__ = ["Mismatch", "VerifyReport", "VerifyError", "verify", "VERIFIABLE"]


class VerifyError(ValueError):
  """A run cannot be verified at all (no certificate record, unknown method, ...)."""


@dataclasses.dataclass(frozen=True)
class Mismatch:
  """One row that does not match its recomputation.

  Attributes:
    idx: the row's dataset index (-1: the run as a whole).
    reason: one line.
  """

  idx: int
  reason: str

  def __str__(self) -> str:
    return f"idx {self.idx}: {self.reason}" if self.idx >= 0 else self.reason


@dataclasses.dataclass(frozen=True)
class VerifyReport:
  """What :func:`verify` found.

  Attributes:
    path: the result file.
    method: the run's method.
    rows: rows checked.
    mismatches: one entry per failing row (and run-wide problems, ``idx`` -1).
  """

  path: str
  method: str
  rows: int
  mismatches: tuple[Mismatch, ...]

  @property
  def ok(self) -> bool:
    return not self.mismatches

  def summary(self) -> str:
    if self.ok:
      return (f"verified: all {self.rows} rows of {self.path} match their recorded counts "
              f"(method {self.method})")
    bad = len({m.idx for m in self.mismatches})
    return (f"NOT verified: {bad} of {self.rows} rows of {self.path} do not match their "
            f"recorded counts (first: {self.mismatches[0]})")


# ----------------------------------------------------------------------------- formulas


def _cp_lower(k, n, a):
  """One-sided Clopper-Pearson lower bound at level ``a`` (0 where k = 0)."""
  k = np.asarray(k, np.float64)
  n = np.asarray(n, np.float64)
  with np.errstate(invalid="ignore"):
    out = st.beta.ppf(a, np.maximum(k, 1e-300), n - k + 1)
  return np.where(k <= 0, 0.0, out)


def _cp_upper(k, n, a):
  """One-sided Clopper-Pearson upper bound at level ``a`` (1 where k = n)."""
  k = np.asarray(k, np.float64)
  n = np.asarray(n, np.float64)
  with np.errstate(invalid="ignore"):
    out = st.beta.ppf(1.0 - a, k + 1, np.maximum(n - k, 1e-300))
  return np.where(k >= n, 1.0, out)


def _binary_radius(p, scale, noise: dict, dim: int):
  """The radius of the lower bound ``p`` for the noise family (0 where p <= 1/2)."""
  p = np.asarray(p, np.float64)
  name, norm = noise["family"], noise["norm"]
  with np.errstate(divide="ignore", invalid="ignore"):
    if name == "gaussian" and norm == "l2":
      r = scale * st.norm.ppf(p)
    elif name == "laplace" and norm == "l1":
      r = -scale * np.log(2.0 * (1.0 - p))
    elif name == "uniform" and norm == "l1":
      r = 2.0 * scale * (p - 0.5)
    elif name == "uniform" and norm == "linf":
      r = 2.0 * scale * (1.0 - np.power(1.5 - p, 1.0 / dim))
    else:
      raise VerifyError(f"no radius formula for {name} noise in the {norm} norm")
  return np.where(p > 0.5, r, 0.0)


def _multiclass(n_a, runner_up, n, alpha, num_classes, scale):
  """Cohen's Theorem 1 with simultaneous bounds: ``(ok, radius)``."""
  others = max(num_classes - 1, 1)
  pa = _cp_lower(n_a, n, alpha / 2)
  pb = np.minimum(_cp_upper(runner_up, n, alpha / (2 * others)), 1.0 - pa)
  ok = pa > pb
  with np.errstate(invalid="ignore"):
    r = 0.5 * scale * (st.norm.ppf(pa) - st.norm.ppf(pb))
  return ok, np.where(ok & (pa > 0.0), np.maximum(r, 0.0), 0.0)


def _looks(n_max: int, first: int, ratio: float) -> list[int]:
  """The budgeted looks ``n_1 < ... < n_K = n_max`` (``rsjax.budgeted.Budget.looks``)."""
  out, n = [], min(int(first), n_max)
  while n < n_max:
    out.append(n)
    n = max(n + 1, math.ceil(n * float(ratio)))
  return out + [n_max]


def _alphas(alpha: float, k: int, final_share: float) -> list[float]:
  if k == 1:
    return [alpha]
  return [(1.0 - final_share) * alpha / (k - 1)] * (k - 1) + [final_share * alpha]


# ----------------------------------------------------------------------------- checks


def _dense(sparse, num_classes: int):
  """``{class: count}`` -> ``[C]`` int64, or None when a class is out of range."""
  out = np.zeros(num_classes, np.int64)
  for k, v in sparse.items():
    k = int(k)
    if not 0 <= k < num_classes or int(v) < 0:
      return None
    out[k] = int(v)
  return out


def _budget_levels(cert: dict, n_max: int, alpha: float, issues: list) -> dict | None:
  """``{look: alpha_k}`` of a budgeted run, after checking its schedule spends at most alpha."""
  b = cert["budget"]
  looks = _looks(n_max, b["first"], b["ratio"])
  alphas = _alphas(alpha, len(looks), float(b["final_share"]))
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


def _check_cohen(cert: dict, res, recs: dict, *, rtol: float, atol: float) -> list[Mismatch]:
  issues: list[Mismatch] = []
  s = cert["sampling"]
  n0, n_max, alpha = int(s["n0"]), int(s["n"]), float(s["alpha"])
  num_classes = int(cert["num_classes"])
  dim = int(np.prod(cert["input_shape"]))
  sigma = cert["sigma"]
  if isinstance(sigma, str) or not (isinstance(sigma, (int, float)) and sigma > 0):
    raise VerifyError(f"cohen run with sigma {sigma!r}: expected a number > 0")
  multiclass = bool(cert.get("multiclass"))
  levels = _budget_levels(cert, n_max, alpha, issues) if cert.get("budget") else None
  if cert.get("budget") and levels is None:
    return issues
  b = len(res)
  rows = np.zeros(b, bool)
  n_a = np.zeros(b, np.int64)
  runner_up = np.zeros(b, np.int64)
  guess = np.zeros(b, np.int64)
  n = np.full(b, n_max, np.int64)
  a = np.full(b, alpha)
  for j, idx in enumerate(res.idx):
    idx = int(idx)
    r = recs.get(idx)
    if r is None:
      issues.append(Mismatch(idx, "no certificate record for this row"))
      continue
    if r.get("counts0") is None or r.get("counts") is None:
      issues.append(Mismatch(idx, "the record holds no counts"))
      continue
    c0, c1 = _dense(r["counts0"], num_classes), _dense(r["counts"], num_classes)
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
      a[j] = levels[used]
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
    guess[j], n_a[j], n[j] = g, c1[g], used
    runner_up[j] = np.delete(c1, g).max() if num_classes > 1 else 0
    rows[j] = True
  if multiclass:
    ok, radius = _multiclass(n_a, runner_up, n, a, num_classes, float(sigma))
  else:
    p = _cp_lower(n_a, n, a)
    ok = p >= 0.5
    radius = np.where(ok, _binary_radius(p, float(sigma), cert["noise"], dim), 0.0)
  predict = np.where(ok, guess, -1)
  for j in np.flatnonzero(rows):
    idx = int(res.idx[j])
    if predict[j] != res.predict[j]:
      issues.append(Mismatch(idx, f"predict {res.predict[j]} in the file, the counts give "
                             f"{predict[j]} (n_A {n_a[j]} of {n[j]})"))
    elif not math.isclose(res.radius[j], radius[j], rel_tol=rtol, abs_tol=atol):
      issues.append(Mismatch(idx, f"radius {res.radius[j]!r} in the file, the counts give "
                             f"{float(radius[j])!r} (n_A {n_a[j]} of {n[j]}, alpha {a[j]:g})"))
  return issues


VERIFIABLE = {"cohen": _check_cohen}


def verify(path, *, rtol: float = 1e-9, atol: float = 1e-12) -> VerifyReport:
  """Recomputes every prediction and radius of a certify result file from its record.

  Args:
    path: a certify result file written with a certificate record
      (``rsjax certify``, or ``rsjax.runner.certify_dataset(..., record=True,
      run={"certificate": rsjax.record.header(...)})``).
    rtol: relative tolerance of the radii.
    atol: absolute tolerance of the radii.

  Returns:
    A :class:`VerifyReport`; ``report.ok`` when every row matches.

  Raises:
    VerifyError: the file has no certificate record or a method whose radius
      cannot be recomputed from counts.
    ValueError: the file is not a certify file (``rsjax.io``).
  """
  p = os.fspath(path)
  if not os.path.exists(p):
    raise VerifyError(f"{p!r} does not exist")
  res = io.read_certify(p)
  run = io.read_run_record(p)
  cert = None if run is None else run.get("certificate")
  if cert is None:
    raise VerifyError(f"{p!r} has no certificate record ({os.path.basename(io.run_record_path(p))}"
                      " with a 'certificate' entry): certify it again with this rsjax")
  if cert.get("format") != record_lib.FORMAT:
    raise VerifyError(f"{p!r}: unknown certificate record format {cert.get('format')!r}")
  method = cert.get("method")
  if method not in VERIFIABLE:
    raise VerifyError(f"{p!r}: method {method!r} cannot be verified from counts by this rsjax "
                      f"(verifiable: {', '.join(sorted(VERIFIABLE))})")
  recs = record_lib.read_records(p)
  issues = VERIFIABLE[method](cert, res, recs, rtol=rtol, atol=atol)
  # The correct column follows from predict and label.
  for j in np.flatnonzero(res.correct != (res.predict == res.label)):
    issues.append(Mismatch(int(res.idx[j]), f"correct {int(res.correct[j])} but predict "
                           f"{res.predict[j]}, label {res.label[j]}"))
  extra = sorted(set(recs) - {int(i) for i in res.idx})
  if extra:
    issues.append(Mismatch(-1, f"the record holds {len(extra)} rows that are not in the file "
                           f"(first idx {extra[0]})"))
  return VerifyReport(p, method, len(res), tuple(issues))
