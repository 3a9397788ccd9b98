"""Appending rows to a result file, each made durable, and resuming it after a crash."""

from __future__ import annotations

import math
import os
import pathlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from rsjax.records._durable import write_header
from rsjax.records._format import check_header, check_kind, parse_rows, split_header
from rsjax.records._lock import lock
from rsjax.records._run_record import check_run, write_run_record
from rsjax.records.spec import RunSpec


def resume(
  path: str | os.PathLike, *, kind: str = "certify", extra_columns: Sequence[str] = ()
) -> set[int]:
  """Prepares a result file for appending and returns the indices already done.

  A missing or empty file is created with its header. In an existing file, a
  truncated last line (no trailing newline, as left by a killed writer) is
  dropped and the file is cut back to its last complete row, so a restarted run
  continues with no duplicate and no missing row.

  Args:
    path: the result file.
    kind: ``"certify"`` or ``"predict"``.
    extra_columns: names of extra columns after the standard ones.

  Returns:
    The set of ``idx`` values already in the file.

  Raises:
    ValueError: the header does not match ``kind`` / ``extra_columns``, or a
      complete row (not the last partial one) is malformed or repeats an idx
      (the message names the file and line).
  """
  cols = check_kind(kind) + tuple(extra_columns)
  header = "\t".join(cols) + "\n"
  data = pathlib.Path(path).read_bytes() if os.path.exists(path) else b""
  text = data.decode("utf-8", errors="replace")
  end = data.rfind(b"\n") + 1  # bytes up to and including the last newline
  if end == 0:
    # A new or empty file, or not even a complete header: a partial header of ours is rewritten.
    if header.startswith(text):
      write_header(path, header)
      return set()
    raise ValueError(f"{os.fspath(path)!r} has no header line; expected {header.strip()!r}")
  names = split_header(text.split("\n", 1)[0])
  got_extra = check_header(names, kind, path)
  if tuple(got_extra) != tuple(extra_columns):
    raise ValueError(
      f"{os.fspath(path)!r} has extra columns {got_extra}, expected {list(extra_columns)}"
    )
  body = data[:end].decode("utf-8", errors="replace").split("\n")[1:-1]
  done = set(parse_rows(path, body, names)["idx"])  # checked before the repair
  if end < len(data):
    with open(path, "r+b") as f:
      f.truncate(end)
      f.flush()
      os.fsync(f.fileno())
  return done


_resume = resume


def _fmt_float(x) -> str:
  x = float(x)
  if math.isnan(x):
    raise ValueError("radius/time must not be NaN")
  return repr(x)


class ResultsWriter:
  """Appends result rows one at a time, each flushed and fsynced.

  Example::

    with ResultsWriter("out.tsv", kind="certify") as w:
      for i in range(len(x)):
        if i in w.done:
          continue
        ...
        w.write(idx=i, label=y[i], predict=c, radius=r, time=t)

  Attributes:
    path: the file.
    kind: ``"certify"`` or ``"predict"``.
    done: the set of ``idx`` already in the file (updated by each write).
  """

  def __init__(
    self,
    path: str | os.PathLike,
    *,
    kind: str = "certify",
    resume: bool = True,
    extra_columns: Sequence[str] = (),
    run: RunSpec | Mapping | None = None,
  ) -> None:
    """Opens a result file for appending, holding its lock until :meth:`close`.

    Args:
      path: the file.
      kind: ``"certify"`` or ``"predict"``.
      resume: if True (default) keep the rows already there (dropping a
        truncated last line) and refuse to write their ``idx`` again; if False
        start a new file, replacing any existing one.
      extra_columns: names of extra columns written after the standard ones.
      run: optional identity of the run (an ``rsjax.records.spec.RunSpec`` or a JSON
        dict), kept in ``<path>.run.json``. Rows already in the file are resumed
        only if their record equals ``run``.

    Raises:
      ResultsLockedError: another writer has the file open.
      RunMismatchError: ``resume`` and the rows in the file come from another
        run (the message names the differing fields), or from an unknown run.
      ValueError: a malformed row (see :func:`resume`).
      OSError: the file cannot be created or written.
    """
    self.kind = kind
    self.columns = check_kind(kind) + tuple(extra_columns)
    self.extra_columns = tuple(extra_columns)
    self.path = os.fspath(path)
    self._lock_fd = lock(self.path)
    try:
      if resume:
        if run is not None:
          check_run(path, run)
        self.done = _resume(path, kind=kind, extra_columns=extra_columns)
      else:
        write_header(path, "\t".join(self.columns) + "\n")
        self.done = set()
      if run is not None:
        write_run_record(path, run)
      self._f = open(path, "a", encoding="utf-8", newline="")
    except BaseException:
      os.close(self._lock_fd)
      raise

  def write(
    self,
    *,
    idx: int,
    label: int,
    predict: int,
    radius: float | None = None,
    time: float = 0.0,
    **extra: Any,
  ) -> None:
    """Appends one row and makes it durable (flush + fsync).

    Args:
      idx: index of the input in its dataset.
      label: true label.
      predict: predicted/certified class, -1 on abstain.
      radius: certified radius (certify files only); must be 0 on abstain.
      time: seconds spent on the input.
      **extra: values of the extra columns, by name.

    Raises:
      ValueError: duplicate ``idx``, missing or unexpected fields, a nonzero
        radius on abstain, or a negative/NaN radius.
    """
    idx, label, predict = int(idx), int(label), int(predict)
    if idx in self.done:
      raise ValueError(f"idx {idx} is already in {self.path!r}")
    if set(extra) != set(self.extra_columns):
      raise ValueError(f"extra columns must be {list(self.extra_columns)}, got {sorted(extra)}")
    fields = [str(idx), str(label), str(predict)]
    if self.kind == "certify":
      if radius is None:
        raise ValueError("radius is required for a certify file")
      radius = float(radius)
      if math.isnan(radius) or radius < 0:
        raise ValueError(f"radius must be >= 0, got {radius!r}")
      if predict == -1 and radius != 0.0:
        raise ValueError(f"radius must be 0.0 on abstain (predict -1), got {radius!r}")
      fields.append(_fmt_float(radius))
    elif radius is not None:
      raise ValueError("a predict file has no radius column")
    fields += [str(int(predict == label)), _fmt_float(time)]
    fields.extend(str(extra[name]) for name in self.extra_columns)
    try:
      self._f.write("\t".join(fields) + "\n")
      self._f.flush()
      os.fsync(self._f.fileno())
    except OSError as e:  # e.g. a full disk: name the file
      raise OSError(e.errno, e.strerror, self.path) from e
    self.done.add(idx)

  def write_many(
    self,
    *,
    idx: Iterable,
    label: Iterable,
    predict: Iterable,
    radius: Iterable | None = None,
    time: float | Iterable = 0.0,
    **extra: Any,
  ) -> None:
    """Appends several rows, each made durable before the next is written.

    Args:
      idx, label, predict: ``[B]`` arrays.
      radius: ``[B]`` radii (certify files only).
      time: a scalar (the same for every row) or ``[B]`` seconds.
      **extra: ``[B]`` arrays of the extra columns.
    """
    idx = np.asarray(idx).reshape(-1)
    b = idx.shape[0]

    def col(v, name):
      a = np.asarray(v)
      if a.ndim == 0:
        return np.broadcast_to(a, (b,))
      a = a.reshape(-1)
      if a.shape[0] != b:
        raise ValueError(f"{name} has {a.shape[0]} rows, idx has {b}")
      return a

    label, predict, time = col(label, "label"), col(predict, "predict"), col(time, "time")
    radius = None if radius is None else col(radius, "radius")
    extra = {k: col(v, k) for k, v in extra.items()}
    for j in range(b):
      self.write(
        idx=idx[j],
        label=label[j],
        predict=predict[j],
        radius=None if radius is None else radius[j],
        time=float(time[j]),
        **{k: v[j] for k, v in extra.items()},
      )

  def close(self) -> None:
    """Closes the file and releases its lock."""
    if not self._f.closed:
      self._f.close()
      os.close(self._lock_fd)

  def __enter__(self) -> ResultsWriter:
    return self

  def __exit__(self, *exc: object) -> None:
    self.close()
