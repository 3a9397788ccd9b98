"""SRS (Gao et al., NeurIPS 2024): the correlation-eliminated two-stage bound."""

from __future__ import annotations

from typing import Any

import numpy as np

from rsjax.claims import (
  Mismatch,
  VerifyError,
  binary_radius,
  compare,
  cp_lower,
  read_rows,
  run_sigma,
)


def check_srs(
  cert: dict, res: Any, recs: dict, *, rtol: float, atol: float, **_: object
) -> list[Mismatch]:
  """SRS (``rsjax.srs.certify(method="srs")``, Gao et al.): the correlation-eliminated bound.

  With ``a = alpha / 2``: ``r = LCB(k, m_A, a)`` (0 when ``m_A = 0``) from the
  ``m`` check samples, then ``p_lower = LCB(N_A r, N, a)`` (the paper's form) or
  ``LCB(N_A r, N r, a)`` (the authors' code, no proven guarantee: reported as
  not a certificate); Clopper-Pearson at a non-integer count through the Beta
  quantile; ``R = sigma Phi^-1(p_lower)``.
  """
  d = cert.get("details")
  if not d or "correction" not in d:
    raise VerifyError(
      "srs run without its check settings in the certificate record (details): "
      "certify it again with this rsjax"
    )
  if cert.get("multiclass"):
    raise VerifyError("srs certifies with the binary radius only")
  issues: list[Mismatch] = []
  correction, m = d["correction"], int(d["m"])
  if correction not in ("paper", "authors_code"):
    raise VerifyError(f"srs run with unknown correction {correction!r}")
  if correction != "paper" or d.get("check") != "random":
    issues.append(
      Mismatch(
        -1,
        f"srs with correction {correction!r} and check {d.get('check')!r}: "
        "the bound is no proven certificate (only 'paper' with random check "
        "positions is)",
      )
    )
  sigma = run_sigma(cert)
  rows = read_rows(cert, res, recs, issues)
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
      why = f"check class {cls} recorded, the paper's test uses the selected class {rows.guess[j]}"
    if why is not None:
      issues.append(Mismatch(idx, why))
      rows.valid[j] = False
  a2 = rows.alpha / 2
  r = np.where(m_a >= 1, cp_lower(k, np.maximum(m_a, 1), a2), 0.0)
  n_eff = rows.n * r if correction == "authors_code" else rows.n.astype(np.float64)
  trials = n_eff >= 1
  p = np.where(trials, cp_lower(rows.n_a * r, np.maximum(n_eff, 1.0), a2), 0.0)
  ok = p >= 0.5
  radius = np.where(
    ok, binary_radius(p, sigma, cert["noise"], int(np.prod(cert["input_shape"]))), 0.0
  )
  compare(res, rows, np.where(ok, rows.guess, -1), radius, issues, rtol=rtol, atol=atol, p_lower=p)
  return issues
