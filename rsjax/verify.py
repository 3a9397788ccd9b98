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

Methods: ``cohen`` and ``deq-standard`` (binary radius of Gaussian / Laplace /
uniform noise, the multiclass radius with simultaneous bounds, and budgeted
runs with their alpha spending), ``idrs`` (Thm 3.2 checked at the radius),
``ucan`` (frozen (mu, sigma)) and ``srs`` (the two-stage bound). ``ddrs`` runs
(whose memory step depends on distances between inputs, not recorded) are
reported as not verifiable, never as verified.

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


@dataclasses.dataclass
class _Rows:
  """The counts of the rows of a run, checked against its settings.

  Attributes:
    valid: ``[b]`` rows whose record is complete and consistent.
    guess, n_a, runner_up, n: ``[b]`` the selected class, its estimation count,
      the largest other count, the estimation samples.
    alpha: ``[b]`` the level of each row's bound.
  """

  valid: np.ndarray
  guess: np.ndarray
  n_a: np.ndarray
  runner_up: np.ndarray
  n: np.ndarray
  alpha: np.ndarray


def _sigma(cert: dict) -> float:
  sigma = cert["sigma"]
  if isinstance(sigma, str) or not (isinstance(sigma, (int, float)) and sigma > 0):
    raise VerifyError(f"{cert.get('method')} run with sigma {sigma!r}: expected a number > 0")
  return float(sigma)


def _read_rows(cert: dict, res, recs: dict, issues: list, levels: dict | None = None) -> _Rows:
  """Parses each row's counts, reporting rows whose record is missing or inconsistent."""
  s = cert["sampling"]
  n0, n_max, alpha = int(s["n0"]), int(s["n"]), float(s["alpha"])
  num_classes = int(cert["num_classes"])
  b = len(res)
  out = _Rows(np.zeros(b, bool), np.zeros(b, np.int64), np.zeros(b, np.int64),
              np.zeros(b, np.int64), np.full(b, n_max, np.int64), np.full(b, alpha))
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
    out.guess[j], out.n_a[j], out.n[j] = g, c1[g], used
    out.runner_up[j] = np.delete(c1, g).max() if num_classes > 1 else 0
    out.valid[j] = True
  return out


def _cohen_radius(cert: dict, rows: _Rows, scale) -> tuple[np.ndarray, np.ndarray]:
  """Cohen's prediction and radius of every row at noise ``scale`` (float or ``[b]``)."""
  if cert.get("multiclass"):
    ok, radius = _multiclass(rows.n_a, rows.runner_up, rows.n, rows.alpha,
                             int(cert["num_classes"]), scale)
  else:
    p = _cp_lower(rows.n_a, rows.n, rows.alpha)
    ok = p >= 0.5
    radius = np.where(ok, _binary_radius(p, scale, cert["noise"],
                                         int(np.prod(cert["input_shape"]))), 0.0)
  return np.where(ok, rows.guess, -1), radius


def _compare(res, rows: _Rows, predict, radius, issues: list, *, rtol: float, atol: float,
             column: str = "radius", values=None) -> None:
  """Reports rows whose prediction or ``column`` (default the radius) differs from the recomputation."""
  values = res.radius if values is None else values
  for j in np.flatnonzero(rows.valid):
    idx = int(res.idx[j])
    if predict[j] != res.predict[j]:
      issues.append(Mismatch(idx, f"predict {res.predict[j]} in the file, the counts give "
                             f"{predict[j]} (n_A {rows.n_a[j]} of {rows.n[j]})"))
    elif not math.isclose(values[j], radius[j], rel_tol=rtol, abs_tol=atol):
      issues.append(Mismatch(idx, f"{column} {values[j]!r} in the file, the counts give "
                             f"{float(radius[j])!r} (n_A {rows.n_a[j]} of {rows.n[j]}, "
                             f"alpha {rows.alpha[j]:g})"))


def _check_cohen(cert: dict, res, recs: dict, *, rtol: float, atol: float) -> list[Mismatch]:
  issues: list[Mismatch] = []
  sigma = _sigma(cert)
  levels = None
  if cert.get("budget"):
    levels = _budget_levels(cert, int(cert["sampling"]["n"]), float(cert["sampling"]["alpha"]),
                            issues)
    if levels is None:
      return issues
  rows = _read_rows(cert, res, recs, issues, levels)
  predict, radius = _cohen_radius(cert, rows, sigma)
  _compare(res, rows, predict, radius, issues, rtol=rtol, atol=atol)
  return issues


# ----------------------------------------------------------------------------- idrs

_U32 = 2.0**-24  # float32 unit roundoff
_IDRS_MIN_P_B = 1e-12  # the IDRS radius caps p_A at 1 - 1e-12 (lowering a lower bound is sound)


def _idrs_holds(radius: float, s0: float, p_b: float, rate: float, slack: float, dim: int,
                max_nc: float, margin: float) -> bool:
  """Both conditions of IDRS Thm 3.2 at ``radius`` (Súkeník et al., ICML 2022).

  The adversary at distance ``radius`` has sigma1 in ``[s0 e^-t, s0 e^t]``,
  ``t = rate * radius + slack``; the worst case at each end (Thm 3.1) is a
  ball (sigma1 < s0) or a ball's complement (sigma1 > s0) whose probability
  ``xi`` under the adversary's noise must stay below 1/2. With ``u = R / s0``,
  ``rho^2 = (sigma1 / s0)^2``, ``lam0 = u^2 / (1 - rho^2)^2``, ``lam1 = rho^2 lam0``:
  ``xi_> = F(F^-1(p_B; lam0) / rho^2; lam1)`` and
  ``xi_< = S(S^-1(p_B; lam0) / rho^2; lam1)`` (F, S: noncentral chi-square CDF
  and survival function in ``dim`` degrees of freedom). Where ``lam0`` would
  exceed ``max_nc`` a more extreme sigma1 is used (sound by Thm 3.1).
  """
  u = radius / s0
  t = rate * radius + slack
  c = u / math.sqrt(max_nc)
  if c >= 1.0:
    return False
  t_lo = max(t, -0.5 * math.log1p(-c))
  t_hi = max(t, 0.5 * math.log1p(c))
  if t_lo > 50.0 or t_hi > 50.0:
    return False
  with np.errstate(all="ignore"):
    rho2 = math.exp(-2.0 * t_lo)
    lam0 = (u / -math.expm1(-2.0 * t_lo)) ** 2
    q = st.ncx2.ppf(p_b, dim, lam0)
    xi_lo = st.ncx2.cdf(q / rho2, dim, rho2 * lam0)
    rho2 = math.exp(2.0 * t_hi)
    lam0 = (u / math.expm1(2.0 * t_hi)) ** 2
    q = st.ncx2.isf(p_b, dim, lam0)
    xi_hi = st.ncx2.sf(q / rho2, dim, rho2 * lam0)
  return bool(np.isfinite(xi_lo) and np.isfinite(xi_hi) and xi_lo < 0.5 - margin
              and xi_hi < 0.5 - margin)


def _idrs_sigma_issue(d: dict, dim: int, r: dict, sigma_col) -> str | None:
  """Why a row's recorded sigma(x), slack or rate do not follow from the design (or None)."""
  s0, slack, rate = (float(r.get(k, "nan")) for k in ("sigma", "slack", "rate"))
  if not (np.isfinite(s0) and s0 > 0 and np.isfinite(slack) and slack >= 0):
    return f"recorded sigma {r.get('sigma')!r} / slack {r.get('slack')!r} are not valid"
  if sigma_col is not None and float(sigma_col) != s0:
    return f"sigma {sigma_col!r} in the file, {s0!r} in the record"
  if d["kind"] == "constant":
    want = float(np.float32(d["sigma_b"]))
    if rate != 0.0 or slack != 0.0 or s0 != want:
      return (f"constant sigma {want!r} has rate 0 and slack 0; the record says sigma {s0!r}, "
              f"rate {rate!r}, slack {slack!r}")
    return None
  r_b, k = float(d["rate"]), int(d["k"])
  eps = (dim + 2 * k + 8) * _U32  # float32 rounding of the k-NN mean distance
  if not math.isclose(rate, r_b * (1.0 + eps), rel_tol=1e-12):
    return f"rate {rate!r} recorded, the design's rate {r_b} with rounding margin is {r_b * (1 + eps)!r}"
  # slack = 2 r eps dist / (1 - eps) + 3 u gives the k-NN mean distance dist >= 0 of the row,
  # and sigma(x) = float32(sigma_b exp(r (dist - m))) (clipped) must follow from it.
  dist = (slack - 3.0 * _U32) * (1.0 - eps) / (2.0 * r_b * eps)
  if dist < -1e-9:
    return f"slack {slack!r} is below the float32 rounding slack {3 * _U32!r}"
  log_s = math.log(float(d["sigma_b"])) + r_b * (max(dist, 0.0) - float(d["m"]))
  if d.get("sigma_min") is not None:
    log_s = max(log_s, math.log(float(d["sigma_min"])))
  if d.get("sigma_max") is not None:
    log_s = min(log_s, math.log(float(d["sigma_max"])))
  want = math.exp(log_s)
  if not math.isclose(s0, want, rel_tol=1e-6):
    return (f"sigma {s0!r} does not follow from the design at the k-NN distance {dist:.6g} "
            f"its slack implies (sigma_b exp(r (d - m)) = {want!r})")
  return None


def _check_idrs(cert: dict, res, recs: dict, *, rtol: float, atol: float) -> list[Mismatch]:
  """IDRS (``rsjax.idrs.certify``): Cohen's counts at sigma(x), the radius of Thm 3.2.

  A radius from the bisection of ``rsjax.idrs.certified_radius`` is checked,
  not recomputed: both conditions of Thm 3.2 must hold at it (soundness), it
  must not exceed Cohen's radius at sigma(x), and they must fail at it plus the
  search tolerance (it is the supremum to within the recorded tolerance).
  """
  d = cert.get("details")
  if not d or d.get("kind") not in ("knn", "constant"):
    raise VerifyError("idrs run without the design in its certificate record (details): certify "
                      "it again with this rsjax")
  if cert.get("multiclass") or cert["noise"]["family"] != "gaussian":
    raise VerifyError("idrs certifies Gaussian noise with the binary radius only")
  issues: list[Mismatch] = []
  rows = _read_rows(cert, res, recs, issues)
  dim = int(np.prod(cert["input_shape"]))
  p = _cp_lower(rows.n_a, rows.n, rows.alpha)
  predict = np.where(p >= 0.5, rows.guess, -1)
  sigma_col = res.extra.get("sigma")
  tol_r, tol_a = float(d["radius_rtol"]), float(d["radius_atol"])
  margin, max_nc = float(d["xi_margin"]), float(d["max_noncentrality"])
  for j in np.flatnonzero(rows.valid):
    idx, r = int(res.idx[j]), recs[int(res.idx[j])]
    why = _idrs_sigma_issue(d, dim, r, None if sigma_col is None else sigma_col[j])
    if why is not None:
      issues.append(Mismatch(idx, why))
      continue
    if predict[j] != res.predict[j]:
      issues.append(Mismatch(idx, f"predict {res.predict[j]} in the file, the counts give "
                             f"{predict[j]} (n_A {rows.n_a[j]} of {rows.n[j]})"))
      continue
    s0, slack, rate = float(r["sigma"]), float(r["slack"]), float(r["rate"])
    pj = min(float(p[j]), 1.0 - _IDRS_MIN_P_B)
    cohen = s0 * float(st.norm.ppf(pj)) if pj > 0.5 else 0.0
    claim = float(res.radius[j])
    if rate == 0.0 and slack == 0.0:
      if not math.isclose(claim, cohen, rel_tol=rtol, abs_tol=atol):
        issues.append(Mismatch(idx, f"radius {claim!r} in the file, the counts give {cohen!r} "
                               f"(constant sigma {s0}, n_A {rows.n_a[j]} of {rows.n[j]})"))
      continue
    tol = tol_r * cohen + tol_a
    args = (s0, 1.0 - pj, rate, slack, dim, max_nc)
    if claim < 0 or claim > cohen * (1 + 1e-12) + atol:
      issues.append(Mismatch(idx, f"radius {claim!r} in the file exceeds Cohen's radius "
                             f"{cohen!r} at sigma {s0} (n_A {rows.n_a[j]} of {rows.n[j]})"))
    elif claim > 0 and not _idrs_holds(claim, *args, margin=0.0):
      issues.append(Mismatch(idx, f"radius {claim!r} in the file is not certified by IDRS Thm "
                             f"3.2 at sigma {s0}, rate {rate:.6g} (n_A {rows.n_a[j]} of "
                             f"{rows.n[j]})"))
    elif claim + tol < cohen and _idrs_holds(claim + tol * (1 + 1e-9), *args, margin=margin):
      issues.append(Mismatch(idx, f"radius {claim!r} in the file is below the IDRS radius of the "
                             f"counts by more than the search tolerance {tol:.3g} (n_A "
                             f"{rows.n_a[j]} of {rows.n[j]})"))
  return issues


# ----------------------------------------------------------------------------- ucan


def _ucan_pattern(shape, sigma: float, pattern: str, kappa: float, iota: float) -> np.ndarray:
  """UCAN's pattern scales ``sigma * (kappa ||(a, b)||_p^2 + iota)``, (a, b) in [-1, 1]^2 (float32)."""
  h, w = int(shape[0]), int(shape[1])
  a = np.linspace(-1.0, 1.0, h) if h > 1 else np.zeros(1)
  b = np.linspace(-1.0, 1.0, w) if w > 1 else np.zeros(1)
  aa, bb = np.abs(a)[:, None], np.abs(b)[None, :]
  if pattern == "linf":
    r2 = np.maximum(aa, bb) ** 2
  elif pattern == "l1":
    r2 = (aa + bb) ** 2
  elif pattern == "l2":
    r2 = aa**2 + bb**2
  else:
    raise VerifyError(f"ucan run with unknown pattern {pattern!r}")
  scales = (kappa * r2 + iota).astype(np.float32)
  if len(shape) == 3:
    scales = np.repeat(scales[:, :, None], int(shape[2]), axis=2)
  return scales * np.float32(sigma)


def _check_ucan(cert: dict, res, recs: dict, *, rtol: float, atol: float) -> list[Mismatch]:
  """UCAN with frozen ``(mu, sigma)`` (``rsjax.anisotropic.certify``): Cohen's CERTIFY of the
  unit noise gives the normalized radius R; radius = min(sigma) R, alm = geomean(sigma) R."""
  d = cert.get("details")
  if not d or "sigma_min" not in d:
    raise VerifyError("ucan run without its (mu, sigma) in the certificate record (details): "
                      "certify it again with this rsjax")
  issues: list[Mismatch] = []
  s_min, s_gmean = float(d["sigma_min"]), float(d["sigma_gmean"])
  if not (s_min > 0 and s_gmean >= s_min):
    issues.append(Mismatch(-1, f"recorded sigma min {s_min!r}, geometric mean {s_gmean!r} are "
                           "not scales"))
    return issues
  if d.get("source") == "pattern":
    scales = _ucan_pattern(cert["input_shape"], float(d["sigma"]), d["pattern"],
                           float(d["kappa"]), float(d["iota"]))
    want_min = float(scales.min())
    want_gmean = float(np.exp(np.mean(np.log(scales.astype(np.float64)))))
    if not (math.isclose(s_min, want_min, rel_tol=1e-6)
            and math.isclose(s_gmean, want_gmean, rel_tol=1e-6)):
      issues.append(Mismatch(-1, f"recorded sigma min {s_min!r} / geometric mean {s_gmean!r} "
                             f"are not those of the pattern ({want_min!r}, {want_gmean!r})"))
      return issues
  rows = _read_rows(cert, res, recs, issues)
  predict, r_norm = _cohen_radius(cert, rows, 1.0)
  for column, scale in (("normalized_radius", 1.0), ("alm", s_gmean)):
    if column not in res.extra:
      raise VerifyError(f"ucan run without its {column!r} column")
    before = len(issues)
    _compare(res, rows, predict, r_norm * scale, issues, rtol=rtol, atol=atol, column=column,
             values=np.asarray(res.extra[column], np.float64))
    if len(issues) > before:
      return issues
  _compare(res, rows, predict, r_norm * s_min, issues, rtol=rtol, atol=atol)
  if "sound" not in res.extra:
    raise VerifyError("ucan run without its 'sound' column")
  for j in np.flatnonzero(np.asarray(res.extra["sound"], np.float64) != 1):
    issues.append(Mismatch(int(res.idx[j]), "sound 0: the row is no certificate"))
  return issues


# ----------------------------------------------------------------------------- srs


def _check_srs(cert: dict, res, recs: dict, *, rtol: float, atol: float) -> list[Mismatch]:
  """SRS (``rsjax.deq.certify(method="srs")``, Gao et al.): the correlation-eliminated bound.

  With ``a = alpha / 2``: ``r = LCB(k, m_A, a)`` (0 when ``m_A = 0``) from the
  ``m`` check samples, then ``p_lower = LCB(N_A r, N, a)`` (the paper's form) or
  ``LCB(N_A r, N r, a)`` (the authors' code, no proven guarantee: reported as
  not a certificate); Clopper-Pearson at a non-integer count through the Beta
  quantile; ``R = sigma Phi^-1(p_lower)``.
  """
  d = cert.get("details")
  if not d or "correction" not in d:
    raise VerifyError("srs run without its check settings in the certificate record (details): "
                      "certify it again with this rsjax")
  if cert.get("multiclass"):
    raise VerifyError("srs certifies with the binary radius only")
  issues: list[Mismatch] = []
  correction, m = d["correction"], int(d["m"])
  if correction not in ("paper", "authors_code"):
    raise VerifyError(f"srs run with unknown correction {correction!r}")
  if correction != "paper" or d.get("check") != "random":
    issues.append(Mismatch(-1, f"srs with correction {correction!r} and check {d.get('check')!r}: "
                           "the bound is no proven certificate (only 'paper' with random check "
                           "positions is)"))
  sigma = _sigma(cert)
  rows = _read_rows(cert, res, recs, issues)
  b = len(res)
  m_a, k = np.zeros(b), np.zeros(b)
  for j in np.flatnonzero(rows.valid):
    idx, r = int(res.idx[j]), recs[int(res.idx[j])]
    try:
      cls, m_a[j], k[j], m_j = (int(r[f]) for f in ("check_class", "m_a", "k", "m"))
    except (KeyError, TypeError, ValueError):
      issues.append(Mismatch(idx, "the record holds no check counts (check_class, m_a, k, m)"))
      rows.valid[j] = False
      continue
    why = None
    if m_j != m:
      why = f"{m_j} check samples recorded, the run has m={m}"
    elif not 0 <= k[j] <= m_a[j] <= m:
      why = f"check counts k={int(k[j])}, m_A={int(m_a[j])} of m={m} are not 0 <= k <= m_A <= m"
    elif correction == "paper" and cls != rows.guess[j]:
      why = (f"check class {cls} recorded, the paper's test uses the selected class "
             f"{rows.guess[j]}")
    if why is not None:
      issues.append(Mismatch(idx, why))
      rows.valid[j] = False
  a2 = rows.alpha / 2
  r = np.where(m_a >= 1, _cp_lower(k, np.maximum(m_a, 1), a2), 0.0)
  n_eff = rows.n * r if correction == "authors_code" else rows.n.astype(np.float64)
  trials = n_eff >= 1
  p = np.where(trials, _cp_lower(rows.n_a * r, np.maximum(n_eff, 1.0), a2), 0.0)
  ok = p >= 0.5
  radius = np.where(ok, _binary_radius(p, sigma, cert["noise"],
                                       int(np.prod(cert["input_shape"]))), 0.0)
  _compare(res, rows, np.where(ok, rows.guess, -1), radius, issues, rtol=rtol, atol=atol)
  return issues


VERIFIABLE = {"cohen": _check_cohen, "idrs": _check_idrs, "ucan": _check_ucan, "srs": _check_srs,
              # Cohen's CERTIFY of the DEQ solved from scratch (rsjax.certify on DEQApply).
              "deq-standard": _check_cohen}


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
