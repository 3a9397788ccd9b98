"""The check of Cohen's CERTIFY (binary, multiclass, budgeted): ``rsjax verify``'s half of the method."""

from __future__ import annotations

from typing import Any

from rsjax.claims import (
  ANYTIME_RULE,
  Mismatch,
  anytime_certificate,
  anytime_levels,
  anytime_stop_issues,
  anytime_table_issues,
  budget_levels,
  cohen_certificate,
  compare,
  looks_stop_issues,
  read_rows,
  run_sigma,
)


def check_cohen(
  cert: dict, res: Any, recs: dict, *, rtol: float, atol: float, **_: object
) -> list[Mismatch]:
  issues: list[Mismatch] = []
  sigma = run_sigma(cert)  # float32(sigma): the noise actually drawn
  levels = None
  anytime = bool(cert.get("budget")) and cert["budget"].get("rule") == ANYTIME_RULE
  if anytime:
    levels = anytime_levels(
      cert, int(cert["sampling"]["n"]), float(cert["sampling"]["alpha"]), issues
    )
    if levels is None:
      return issues
    issues.extend(anytime_table_issues(cert, sigma))
  elif cert.get("budget"):
    levels = budget_levels(
      cert, int(cert["sampling"]["n"]), float(cert["sampling"]["alpha"]), issues
    )
    if levels is None:
      return issues
  rows = read_rows(cert, res, recs, issues, levels)
  if anytime:
    predict, radius, p = anytime_certificate(cert, rows, sigma)
  else:
    predict, radius, p = cohen_certificate(cert, rows, sigma)
  compare(res, rows, predict, radius, issues, rtol=rtol, atol=atol, p_lower=p)
  # A row that stopped before N: its rule's stopping test, met at that look by its counts.
  if anytime:
    issues.extend(anytime_stop_issues(cert, res, rows, sigma))
  elif levels is not None:
    issues.extend(looks_stop_issues(cert, res, rows, levels, sigma))
  return issues
