"""A row that does not match its recomputation, and a run that cannot be checked at all."""

from __future__ import annotations

import dataclasses

__all__ = ["Mismatch", "VerifyError"]


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
