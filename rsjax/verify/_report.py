"""What ``rsjax verify`` reports: a row that does not match, the report of a run."""

from __future__ import annotations

import dataclasses

from rsjax.claims import Mismatch, VerifyError

__all__ = ["Mismatch", "VerifyError", "VerifyReport"]


@dataclasses.dataclass(frozen=True)
class VerifyReport:
  """What :func:`verify` found.

  Attributes:
    path: the result file.
    method: the run's method.
    rows: rows in the file.
    mismatches: one entry per failing row (and run-wide problems, ``idx`` -1).
    declared: the rows the run declares (its index range).
    missing: declared rows not in the file.
    unchecked: what could not be checked here, one line each (e.g. the labels
      when the dataset cannot be loaded).
    data: the dataset split the labels and inputs were checked against, or None.
    claim: the claim checked, in one line (method, noise, sigma, N, alpha, radius, rows).
    unverified: the file's columns verify does not vouch for (``time`` and any column
      the method does not define); ``rsjax analyze`` reads them only with ``--unverified``.
  """

  path: str
  method: str
  rows: int
  mismatches: tuple[Mismatch, ...]
  declared: int = 0
  missing: int = 0
  unchecked: tuple[str, ...] = ()
  data: str | None = None
  claim: str = ""
  unverified: tuple[str, ...] = ()

  @property
  def complete(self) -> bool:
    """Every declared row is in the file (and there is at least one)."""
    return self.missing == 0 and self.rows > 0

  @property
  def ok(self) -> bool:
    return not self.mismatches and self.complete

  def summary(self) -> str:
    if self.mismatches:
      bad = len({m.idx for m in self.mismatches if m.idx >= 0})
      if not bad:  # about the run as a whole (rows missing from the file), no row to count
        held = f" ({self.rows} of {self.declared} declared rows in it)" if self.declared else ""
        return f"NOT verified: {self.path}{held}: {self.mismatches[0]}"
      return (
        f"NOT verified: {bad} of {self.rows} rows of {self.path} do not match their "
        f"recorded counts (first: {self.mismatches[0]})"
      )
    if not self.complete:
      return (
        f"NOT verified: incomplete: {self.declared - self.missing} of {self.declared} "
        f"rows of {self.path} (the rows present match their counts)"
      )
    text = f"verified: all {self.rows} rows of {self.path} match their recorded counts"
    text += f" ({self.claim})" if self.claim else f" (method {self.method})"
    if self.data:
      text += f"; labels and inputs are those of {self.data}"
    if self.unchecked:
      text += "; not checked: " + "; ".join(self.unchecked)
    if self.unverified:
      columns = ", ".join(self.unverified)
      text += f"; columns not verified (analyze reads them only with --unverified): {columns}"
    return text
