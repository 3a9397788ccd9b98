"""The columns of a result file and the check of each field."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence

from rsjax.records import limits

CERTIFY_COLUMNS = ("idx", "label", "predict", "radius", "correct", "time")
PREDICT_COLUMNS = ("idx", "label", "predict", "correct", "time")
COLUMNS = {"certify": CERTIFY_COLUMNS, "predict": PREDICT_COLUMNS}

_TIMEDELTA = re.compile(
  r"^(?:(?P<days>-?\d{1,9}) days?, )?(?P<h>\d{1,9}):(?P<m>\d{1,2}):(?P<s>\d{1,2}(?:\.\d*)?)$",
  re.ASCII,
)


def read_text(path: str | os.PathLike, what: str) -> str:
  """The UTF-8 text of a file; bytes that are not UTF-8 are an error naming the file (``what``
  it is) and the line (a ``ValueError``, one line)."""
  with open(path, "rb") as f:
    data = f.read()
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError as e:
    line = data[: e.start].count(b"\n") + 1
    raise ValueError(
      f"{what} {os.fspath(path)!r} line {line}: not UTF-8 text (byte 0x{data[e.start]:02x})"
    ) from None


def parse_time(text: str) -> float:
  """Parses a time field: float seconds or a ``datetime.timedelta`` string.

  Args:
    text: e.g. ``"15.4"``, ``"0:00:15.412345"`` or ``"1 day, 2:03:04.5"``.

  Returns:
    The time in seconds (float).

  Raises:
    ValueError: if the text is neither form in ASCII digits, or not finite (``inf``, ``nan``,
      ``1e999``).
  """
  text = text.strip()
  m = _TIMEDELTA.match(text)
  if m is not None:
    return int(m["days"] or 0) * 86400.0 + int(m["h"]) * 3600.0 + int(m["m"]) * 60.0 + float(m["s"])
  try:
    return limits.float_text(text)
  except ValueError:
    raise ValueError(
      f"time must be finite float seconds or H:MM:SS[.ffffff], got {limits.shown(text)}"
    ) from None


def check_kind(kind: str) -> tuple[str, ...]:
  """The standard columns of a ``"certify"`` or ``"predict"`` file."""
  if kind not in COLUMNS:
    raise ValueError(f"kind must be 'certify' or 'predict', got {kind!r}")
  return COLUMNS[kind]


def split_header(line: str) -> list[str]:
  """The column names of a header line."""
  return line.rstrip("\r\n").split("\t")


def check_header(names: Sequence[str], kind: str, path: str | os.PathLike) -> list[str]:
  """Checks the standard columns of a header; returns the extra column names."""
  cols = check_kind(kind)
  repeated = sorted({n for n in names if list(names).count(n) > 1})
  if repeated:
    raise ValueError(f"{os.fspath(path)!r}: header repeats the column(s) {repeated}")
  if tuple(names[: len(cols)]) != cols:
    raise ValueError(
      f"{os.fspath(path)!r} is not a {kind} file: header {chr(9).join(names)!r}, "
      f"expected {chr(9).join(cols)!r}"
    )
  return list(names[len(cols) :])


_ASCII = "(ASCII digits, no '+', no leading zeros)"


def _integer(lo: int, hi: int) -> tuple[Callable[[str], int], str]:
  """The check of an integer column in ``[lo, hi]``: ``(parse, what a valid value is)``."""
  return lambda t: limits.int_text(t, lo, hi), f"an integer in {lo}..{hi} {_ASCII}"


# Check of each standard column: (parse, what a valid value is). Integers are ASCII digits
# (``int()`` also reads ``"1_0"``, ``"+10"``, ``"010"`` and other scripts' digits) within
# ``rsjax.records.limits``; numbers are ASCII decimals, finite.
_FIELDS = {
  "idx": _integer(0, limits.MAX_INDEX),
  "label": _integer(0, limits.MAX_CLASSES - 1),
  "predict": _integer(-1, limits.MAX_CLASSES - 1),
  "radius": (lambda t: limits.float_text(t, 0.0), "a finite number >= 0 in ASCII digits"),
  "correct": (lambda t: {"0": 0, "1": 1}[t], "0 or 1"),
  "time": (parse_time, "finite seconds or H:MM:SS in ASCII digits"),
}


def parse_rows(
  path: str | os.PathLike, lines: Sequence[str], header: Sequence[str]
) -> dict[str, list]:
  """Parses and checks complete rows (file lines 2, 3, ...) into columns.

  Raises:
    ValueError: naming the file and line, for a wrong number of fields, a bad
      value in a standard column, or an ``idx`` seen before.
  """
  ncols = len(header)
  cols: dict[str, list] = {name: [] for name in header}
  first_line: dict[int, int] = {}
  for lineno, line in enumerate(lines, start=2):
    where = f"{os.fspath(path)!r} line {lineno}"
    fields = line.rstrip("\r").split("\t")
    if len(fields) != ncols:
      raise ValueError(f"{where}: {len(fields)} fields, expected {ncols} ({' '.join(header)})")
    for name, text in zip(header, fields, strict=True):
      if name in _FIELDS:
        parse, valid = _FIELDS[name]
        try:
          text = parse(text)
        except (ValueError, KeyError):
          raise ValueError(f"{where}: {name} must be {valid}, got {limits.shown(text)}") from None
      cols[name].append(text)
    idx = cols["idx"][-1]
    if idx in first_line:
      raise ValueError(f"{where}: duplicate idx {idx} (also on line {first_line[idx]})")
    first_line[idx] = lineno
  return cols
