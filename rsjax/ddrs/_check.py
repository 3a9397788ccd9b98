"""DDRS (Alfarra et al., ECCV 2022): Cohen's radius at each row's sigma, then the memory.

The memory step (Algorithm 3) depends on the distances between the inputs, so it
is replayed from the inputs themselves, in the file's row order (the order the
run processed them), each checked against its recorded fingerprint.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from rsjax.claims import Mismatch, VerifyError, cohen_certificate, compare, read_rows
from rsjax.runs import record as record_lib

#: Rows whose distances to all earlier rows are bounded by one matrix product.
_BLOCK = 512
_U64 = 2.0**-53  # float64 unit roundoff


def _toward_zero(v: float) -> float:
  return float(np.nextafter(v, 0.0)) if v > 0 else 0.0


def replay_memory(
  x: ArrayLike, classes: ArrayLike, radii: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
  """DDRS Algorithm 3 over inputs in order, in float64.

  Ball ``j`` (an earlier row of another class, not abstained) meets row ``i``'s
  ball ``(x_i, r_i)`` iff ``||x_i - x_j||_2 < r_j + r_i``, with ``r_j`` the
  earlier row's radius after the memory. With none met the row is kept;
  otherwise, with ``m = min (d_j - r_j)`` over the balls met, a row inside a ball
  (``m < 0``) takes that ball's class and radius ``|m|``, else radius ``m``
  (each rounded one float64 ulp toward zero, so that balls stay disjoint).

  Distances are exact float64 sums of squares for the balls that can meet; a
  matrix product per block of rows only rules out the others, with a margin
  above its worst-case rounding error.

  Args:
    x: ``[B, D]`` float64 inputs in processing order.
    classes: ``[B]`` int classes before the memory (-1: abstain).
    radii: ``[B]`` float64 radii before the memory.

  Returns:
    ``(classes [B] int64, radii [B] float64)`` after the memory.
  """
  x = np.asarray(x, np.float64)
  b, dim = x.shape
  cls = np.asarray(classes, np.int64).copy()
  rad = np.asarray(radii, np.float64).copy()
  sq = np.einsum("ij,ij->i", x, x)
  gamma = 4.0 * (dim + 2) * _U64  # bound on the relative error of the Gram-form distance
  for s in range(0, b, _BLOCK):
    e = min(b, s + _BLOCK)
    # Squared distances of the block to every earlier block (Gram form).
    d2 = sq[s:e, None] + sq[None, :s] - 2.0 * (x[s:e] @ x[:s].T)
    slack = gamma * (sq[s:e, None] + sq[None, :s]) + 1e-300
    for i in range(s, e):
      c, r = int(cls[i]), float(rad[i])
      if c < 0:
        continue
      ball = (cls[:i] >= 0) & (cls[:i] != c)
      reach = (rad[:i] + r) ** 2 * (1.0 + gamma)
      ball[:s] &= d2[i - s] - slack[i - s] < reach[:s]
      near = np.flatnonzero(ball)
      if not near.size:
        continue
      d = np.sqrt(np.sum((x[near] - x[i]) ** 2, axis=1))
      hit = d < rad[near] + r
      if not np.any(hit):
        continue
      near, gaps = near[hit], d[hit] - rad[near[hit]]
      k = int(np.argmin(gaps))
      if gaps[k] < 0:
        cls[i], rad[i] = cls[near[k]], _toward_zero(-float(gaps[k]))
      else:
        rad[i] = _toward_zero(float(gaps[k]))
  return cls, rad


def _sigmas(res, recs, rows, issues) -> np.ndarray:
  """Each row's sigma: the record's (the ``sigma`` column in records without one), which the
  ``sigma`` column must equal; a row without a valid sigma is left out."""
  if "sigma" not in res.extra:
    raise VerifyError("ddrs run without its 'sigma' column")
  col = np.asarray(res.extra["sigma"], np.float64)
  out = col.copy()
  for j in np.flatnonzero(rows.valid):
    idx = int(res.idx[j])
    rec = recs[idx].get("sigma")
    s = col[j] if rec is None else float(rec)
    out[j] = s
    if not (math.isfinite(s) and s > 0 and float(np.float32(s)) == s):
      issues.append(Mismatch(idx, f"sigma {s!r} is not the float32 noise level of a run"))
      rows.valid[j] = False
    elif col[j] != s:
      issues.append(Mismatch(idx, f"sigma {col[j]!r} in the file, {s!r} in the record"))
  return out


def check_ddrs(
  cert: dict,
  res: Any,
  recs: dict,
  *,
  rtol: float,
  atol: float,
  inputs: ArrayLike | None = None,
  **_: object,
) -> list[Mismatch]:
  """DDRS: ``predict_mc``/``radius_mc`` are Cohen's at the row's sigma; with the memory
  on, ``predict``/``radius`` its replay over the inputs in file order (without it the
  rows are no certificate, and each is reported)."""
  for column in ("predict_mc", "radius_mc", "sound"):
    if column not in res.extra:
      raise VerifyError(f"ddrs run without its {column!r} column")
  if cert.get("multiclass") or cert["noise"]["family"] != "gaussian":
    raise VerifyError("ddrs certifies Gaussian noise with the binary radius only")
  memory = (cert.get("settings") or {}).get("ddrs_memory", "on") == "on"
  issues: list[Mismatch] = []
  rows = read_rows(cert, res, recs, issues)
  sigma = _sigmas(res, recs, rows, issues)
  pred_mc, rad_mc, p = cohen_certificate(cert, rows, sigma)
  compare(
    res,
    rows,
    pred_mc,
    rad_mc,
    issues,
    rtol=rtol,
    atol=atol,
    columns=("predict_mc", "radius_mc"),
    p_lower=p,
  )
  sound = np.asarray(res.extra["sound"], np.float64)
  if not memory:
    compare(res, rows, pred_mc, rad_mc, issues, rtol=rtol, atol=atol)
    for j in np.flatnonzero(sound != 0):
      issues.append(Mismatch(int(res.idx[j]), "sound 1 without the memory"))
    issues.extend(
      Mismatch(int(i), "sound 0: without the memory the row is no certificate") for i in res.idx
    )
    return issues
  for j in np.flatnonzero(sound != 1):
    issues.append(Mismatch(int(res.idx[j]), "sound 0 in a run with the memory"))
  if not rows.valid.all() or not len(res):
    if len(res):
      issues.append(
        Mismatch(
          -1, "the memory step is not replayed: a row before it does not follow from its record"
        )
      )
    return issues
  if inputs is None:
    raise VerifyError(
      "ddrs run: the memory step needs the inputs (verify(..., inputs=...), or the run's dataset)"
    )
  x = np.asarray(inputs(np.asarray(res.idx, np.int64)))
  if x.shape[0] != len(res):
    raise VerifyError(f"inputs gave {x.shape[0]} inputs for {len(res)} rows")
  bad = [
    int(i)
    for i, xi in zip(res.idx, x, strict=True)
    if record_lib.input_fingerprint(xi) != recs[int(i)].get("input")
  ]
  if bad:
    issues.extend(Mismatch(i, "the input differs from its recorded fingerprint") for i in bad)
    return issues
  pred, rad = replay_memory(x.reshape(len(res), -1), pred_mc, rad_mc)
  compare(res, rows, pred, np.where(pred >= 0, rad, 0.0), issues, rtol=rtol, atol=atol)
  return issues
