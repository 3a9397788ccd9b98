"""What ``rsjax verify`` reports: a row that does not match, the report of a run."""

from __future__ import annotations

import dataclasses

__all__ = ["Mismatch", "VerifyError", "VerifyReport"]


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

