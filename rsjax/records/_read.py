"""Reading result files into NumPy arrays."""

from __future__ import annotations

import contextlib
import dataclasses
import os

import numpy as np

from rsjax.records._format import check_header, parse_rows, read_text, split_header

#: The integer columns of both kinds of file (``correct`` read as a flag).
INT_COLUMNS = ("idx", "label", "predict", "correct")


@dataclasses.dataclass(frozen=True)
class PredictResults:
  """Rows of a predict file, as NumPy arrays of length ``N``.

  Attributes:
    idx: ``[N]`` int64 index of the input in its dataset.
    label: ``[N]`` int64 true label.
    predict: ``[N]`` int64 predicted class, -1 on abstain.
    correct: ``[N]`` bool, ``predict == label``.
    time: ``[N]`` float64 seconds spent on the input.
    extra: extra columns by name, ``[N]`` float64 (or str where not numeric).
  """

  idx: np.ndarray
  label: np.ndarray
  predict: np.ndarray
  correct: np.ndarray
  time: np.ndarray
  extra: dict = dataclasses.field(default_factory=dict)

  def __len__(self) -> int:
    return int(self.idx.shape[0])


@dataclasses.dataclass(frozen=True, kw_only=True)
class CertifyResults(PredictResults):
  """Rows of a certify file: those of a predict file (``predict``: the certified class, -1 on
  abstain) and

  Attributes:
    radius: ``[N]`` float64 certified radius (0.0 on abstain).
  """

  radius: np.ndarray


def _parse_extra(values: list[str]) -> np.ndarray:
  try:
    return np.asarray([float(v) for v in values], dtype=np.float64)
  except ValueError:
    return np.asarray(values, dtype=object)


def _read(path, kind: str | None):
  text = read_text(path, "result file")
  if not text:
    raise ValueError(f"{os.fspath(path)!r} is empty (no header)")
  lines = text.split("\n")
  header = split_header(lines[0])
  if kind is None:
    kind = "certify" if "radius" in header else "predict"
  extra_names = check_header(header, kind, path)
  body = lines[1:]
  # The text ends with "\n", so the last element is "" for a clean file; a last
  # line without newline is a row being written (or cut by a crash): it is kept
  # only if it is a valid row.
  partial = body.pop() if body else ""
  get = parse_rows(path, body, header)
  if partial:
    with contextlib.suppress(ValueError):
      get = parse_rows(path, body + [partial], header)

  common: dict = {name: np.asarray(get[name], np.int64) for name in INT_COLUMNS}
  common["correct"] = common["correct"].astype(bool)
  common["time"] = np.asarray(get["time"], dtype=np.float64)
  common["extra"] = {name: _parse_extra(list(get[name])) for name in extra_names}
  if kind == "certify":
    return CertifyResults(radius=np.asarray(get["radius"], dtype=np.float64), **common)
  return PredictResults(**common)


def read_certify(path: str | os.PathLike) -> CertifyResults:
  """Reads a certify file (``idx label predict radius correct time [extra...]``).

  Args:
    path: the file.

  Returns:
    A :class:`CertifyResults` of NumPy arrays, in file order.

  Raises:
    ValueError: wrong header, a malformed row or a repeated idx (naming the
      line). An incomplete last line (no newline) that is not a valid row is
      ignored.
  """
  return _read(path, "certify")


def read_predict(path: str | os.PathLike) -> PredictResults:
  """Reads a predict file (``idx label predict correct time [extra...]``)."""
  return _read(path, "predict")


def read_results(path: str | os.PathLike) -> CertifyResults | PredictResults:
  """Reads a certify or predict file, telling them apart by the header."""
  return _read(path, None)
