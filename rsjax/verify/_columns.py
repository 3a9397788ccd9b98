"""Which columns of a result file ``rsjax verify`` vouches for, and the check of the generic ones.

Every column a reader reads is either verified or named as unverified:

* the standard columns ``idx label predict radius correct``: verified (the
  rows against the declared range and the dataset, the prediction and radius
  from the counts, ``correct`` from ``predict`` and ``label``);
* the method's own columns (``Method.columns``, e.g. UCAN's ``alm``, IDRS's
  ``sigma``): verified by the method's check;
* ``samples`` (budgeted runs) and ``counts`` (``--save-counts``): verified here,
  against the certificate record, whatever the method (that a row stopped before N
  where its rule stops: by the budgeted check, ``rsjax.claims.looks_stop_issues``,
  ``anytime_stop_issues``);
* ``time`` and every other column: not verified. ``verify`` lists them, and
  ``rsjax analyze`` reads them only with ``--unverified``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from rsjax.claims import Mismatch, dense

if TYPE_CHECKING:
  from rsjax.records.io import CertifyResults

__all__ = [
  "STANDARD",
  "check_generic",
  "non_numeric",
  "unverified_columns",
  "verified_columns",
]

#: The standard columns verify checks for every method.
STANDARD = ("idx", "label", "predict", "radius", "correct")
#: Extra columns verify checks against the certificate record for every method.
SAMPLES, COUNTS = "samples", "counts"
_COUNTS_TEXT = re.compile(r"^[0-9]+(,[0-9]+)*$")


def verified_columns(method_columns: Iterable[str]) -> frozenset[str]:
  """The columns verify vouches for in a run of a method defining ``method_columns``."""
  return frozenset((*STANDARD, *method_columns, SAMPLES, COUNTS))


def unverified_columns(res: CertifyResults, method_columns: Iterable[str]) -> tuple[str, ...]:
  """The file's columns verify does not vouch for: ``time`` and any column the method does
  not define, in the file's order."""
  ok = verified_columns(method_columns)
  return ("time", *(c for c in res.extra if c not in ok))


def non_numeric(res: CertifyResults, names: Iterable[str]) -> str | None:
  """Where the first of the columns ``names`` holds a value that is not a number (the file's
  line, the column, the value, in words), or None when each is numeric."""
  for name in names:
    col = res.extra.get(name)
    if col is None or col.dtype != object:
      continue
    for j, v in enumerate(col):
      try:
        float(v)
      except (TypeError, ValueError):
        return f"line {j + 2}: {name} must be a number, got {str(v)[:40]!r}"
  return None


def _shown(v: object) -> object:
  """A value as a message shows it (a NumPy float as a Python one)."""
  return float(v) if isinstance(v, np.floating) else v


def check_generic(
  res: CertifyResults, recs: dict[int, dict], *, n_max: int, num_classes: int
) -> list[Mismatch]:
  """``samples`` and ``counts`` against each row's certificate record.

  Args:
    res: the file's rows.
    recs: the certificate record by ``idx``.
    n_max: the run's N.
    num_classes: C.

  Returns:
    One :class:`Mismatch` per row whose column differs from its record.
  """
  issues: list[Mismatch] = []
  rows = [(j, idx, recs.get(idx)) for j, idx in enumerate(res.idx.tolist())]
  rows = [(j, idx, r) for j, idx, r in rows if r is not None]  # else: a row without a record
  if SAMPLES in res.extra:
    col = res.extra[SAMPLES]
    for j, idx, r in rows:
      want = n_max if r.get("n") is None else r["n"]  # N where the record states none
      got = col[j]
      if not (isinstance(got, (float, np.floating)) and float(got) == want):
        issues.append(
          Mismatch(idx, f"samples {_shown(got)!r} in the file, the record's counts are of {want!r}")
        )
  if COUNTS in res.extra:
    col = res.extra[COUNTS]
    for j, idx, r in rows:
      text = col[j]
      if isinstance(text, (float, np.floating)):  # one class: parsed as a number
        text = str(int(text)) if float(text).is_integer() and text >= 0 else repr(text)
      want = dense(r.get("counts"), num_classes)
      if want is None or not _COUNTS_TEXT.match(str(text)):
        issues.append(Mismatch(idx, f"counts {text!r} in the file are not the record's counts"))
        continue
      got = np.asarray([int(v) for v in str(text).split(",")], np.int64)
      if got.shape != want.shape or np.any(got != want):
        issues.append(
          Mismatch(idx, f"counts {text!r} in the file, the record's estimation counts differ")
        )
  return issues
