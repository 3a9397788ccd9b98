"""Result files in the format of Cohen et al.'s reference code.

Certify files are tab-separated, one header line, then one row per input::

  idx	label	predict	radius	correct	time
  0	3	3	0.4380912837591553	1	15.412345

``predict`` is -1 on abstain (with radius 0.0), ``correct`` is
``int(predict == label)`` and ``time`` is in seconds. Predict files drop the
radius column (``idx label predict correct time``).

Differences from the reference, on purpose:
  * the radius is written with full precision (``repr`` of the float), not with
    3 significant digits, so that metrics computed from a file equal the ones
    computed in memory;
  * ``time`` is written as float seconds. The reader accepts both float seconds
    and ``datetime.timedelta`` strings (``0:00:15.412345``), since the
    reference writes the latter and its shipped logs the former.

Writers append one row at a time and flush and fsync each row, so a run killed
at any point (even with SIGKILL) loses at most the row in flight. On restart
:func:`resume` drops a truncated last line and returns the indices already done.
Extra columns (for example a per-input sigma) may follow the standard ones.

Rows are checked when read (by :func:`resume` and the readers): a wrong number
of fields, a non-numeric field or a repeated ``idx`` is an error naming the file
and line. Only an incomplete last line (no newline: a crash mid-write) is
dropped.

**Run record.** A writer given ``run`` (a JSON dict identifying the run: method,
model fingerprint, dataset, sigma, N, ...) keeps it next to the rows in
``<file>.run.json``, so readers that know nothing of it (pandas
``read_csv(f, sep="\t")``, Cohen et al.'s ``analyze.py``) read the file as
before. Resuming a file whose record differs raises :class:`RunMismatchError`
naming the differing fields.

**One writer at a time.** A writer holds an exclusive ``fcntl`` lock on the file
while it is open; a second writer raises :class:`ResultsLockedError`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence

try:
  import fcntl
except ImportError:  # not POSIX: no lock
  fcntl = None

import numpy as np

__all__ = [
    "CERTIFY_COLUMNS",
    "PREDICT_COLUMNS",
    "CertifyResults",
    "PredictResults",
    "ResultsLockedError",
    "ResultsWriter",
    "RunMismatchError",
    "parse_time",
    "read_certify",
    "read_predict",
    "read_results",
    "read_run_record",
    "resume",
    "run_record_path",
    "write_run_record",
]

CERTIFY_COLUMNS = ("idx", "label", "predict", "radius", "correct", "time")
PREDICT_COLUMNS = ("idx", "label", "predict", "correct", "time")
_COLUMNS = {"certify": CERTIFY_COLUMNS, "predict": PREDICT_COLUMNS}

_TIMEDELTA = re.compile(
    r"^(?:(?P<days>-?\d+) days?, )?(?P<h>\d+):(?P<m>\d{1,2}):(?P<s>\d{1,2}(?:\.\d*)?)$")


def parse_time(text: str) -> float:
  """Parses a time field: float seconds or a ``datetime.timedelta`` string.

  Args:
    text: e.g. ``"15.4"``, ``"0:00:15.412345"`` or ``"1 day, 2:03:04.5"``.

  Returns:
    The time in seconds (float).

  Raises:
    ValueError: if the text is neither form.
  """
  text = text.strip()
  m = _TIMEDELTA.match(text)
  if m is not None:
    days = int(m["days"]) if m["days"] else 0
    return days * 86400.0 + int(m["h"]) * 3600.0 + int(m["m"]) * 60.0 + float(m["s"])
  try:
    return float(text)
  except ValueError:
    raise ValueError(f"time must be float seconds or H:MM:SS[.ffffff], got {text!r}") from None


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


def _check_kind(kind: str) -> tuple[str, ...]:
  if kind not in _COLUMNS:
    raise ValueError(f"kind must be 'certify' or 'predict', got {kind!r}")
  return _COLUMNS[kind]


def _split_header(line: str) -> list[str]:
  return line.rstrip("\r\n").split("\t")


def _check_header(names: Sequence[str], kind: str, path) -> list[str]:
  """Checks the standard columns of a header; returns the extra column names."""
  cols = _check_kind(kind)
  if tuple(names[:len(cols)]) != cols:
    raise ValueError(
        f"{os.fspath(path)!r} is not a {kind} file: header {chr(9).join(names)!r}, "
        f"expected {chr(9).join(cols)!r}")
  return list(names[len(cols):])


def _int_field(text: str, lo: int) -> int:
  v = int(text)
  if v < lo:
    raise ValueError
  return v


def _radius_field(text: str) -> float:
  v = float(text)
  if not (math.isfinite(v) and v >= 0):
    raise ValueError
  return v


# Check of each standard column: (parse, what a valid value is).
_FIELDS = {
    "idx": (lambda t: _int_field(t, 0), "an integer >= 0"),
    "label": (lambda t: _int_field(t, 0), "an integer >= 0"),
    "predict": (lambda t: _int_field(t, -1), "an integer >= -1"),
    "radius": (_radius_field, "a finite number >= 0"),
    "correct": (lambda t: {"0": 0, "1": 1}[t], "0 or 1"),
    "time": (parse_time, "seconds or H:MM:SS"),
}


def _parse_rows(path, lines: Sequence[str], header: Sequence[str]) -> dict[str, list]:
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
    for name, text in zip(header, fields):
      if name in _FIELDS:
        parse, valid = _FIELDS[name]
        try:
          text = parse(text)
        except (ValueError, KeyError):
          raise ValueError(f"{where}: {name} must be {valid}, got {text!r}") from None
      cols[name].append(text)
    idx = cols["idx"][-1]
    if idx in first_line:
      raise ValueError(f"{where}: duplicate idx {idx} (also on line {first_line[idx]})")
    first_line[idx] = lineno
  return cols


def _parse_extra(values: list[str]) -> np.ndarray:
  try:
    return np.asarray([float(v) for v in values], dtype=np.float64)
  except ValueError:
    return np.asarray(values, dtype=object)


def _read(path, kind: str | None):
  with open(path, encoding="utf-8", newline="") as f:
    text = f.read()
  if not text:
    raise ValueError(f"{os.fspath(path)!r} is empty (no header)")
  lines = text.split("\n")
  header = _split_header(lines[0])
  if kind is None:
    kind = "certify" if "radius" in header else "predict"
  extra_names = _check_header(header, kind, path)
  body = lines[1:]
  # The text ends with "\n", so the last element is "" for a clean file; a last
  # line without newline is a row being written (or cut by a crash): it is kept
  # only if it is a valid row.
  partial = body.pop() if body else ""
  get = _parse_rows(path, body, header)
  if partial:
    try:
      get = _parse_rows(path, body + [partial], header)
    except ValueError:
      pass

  def ints(name):
    return np.asarray(get[name], dtype=np.int64)

  common = dict(
      idx=ints("idx"),
      label=ints("label"),
      predict=ints("predict"),
      correct=ints("correct").astype(bool),
      time=np.asarray(get["time"], dtype=np.float64),
      extra={name: _parse_extra(list(get[name])) for name in extra_names},
  )
  if kind == "certify":
    radius = np.asarray(get["radius"], dtype=np.float64)
    return CertifyResults(radius=radius, **common)
  return PredictResults(**common)


def read_certify(path) -> CertifyResults:
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


def read_predict(path) -> PredictResults:
  """Reads a predict file (``idx label predict correct time [extra...]``)."""
  return _read(path, "predict")


def read_results(path) -> CertifyResults | PredictResults:
  """Reads a certify or predict file, telling them apart by the header."""
  return _read(path, None)


def _fsync_dir(path) -> None:
  d = os.path.dirname(os.path.abspath(path))
  try:
    fd = os.open(d, os.O_RDONLY)
  except OSError:
    return
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


def _write_header(path, header: str) -> None:
  with open(path, "w", encoding="utf-8", newline="") as f:
    f.write(header)
    f.flush()
    os.fsync(f.fileno())
  _fsync_dir(path)


def resume(path, *, kind: str = "certify", extra_columns: Sequence[str] = ()) -> set[int]:
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
  cols = _check_kind(kind) + tuple(extra_columns)
  header = "\t".join(cols) + "\n"
  if not os.path.exists(path) or os.path.getsize(path) == 0:
    _write_header(path, header)
    return set()
  with open(path, "rb") as f:
    data = f.read()
  text = data.decode("utf-8", errors="replace")
  end = data.rfind(b"\n") + 1  # bytes up to and including the last newline
  if end == 0:
    # Not even a complete header: a partial header of ours is rewritten.
    if header.startswith(text):
      _write_header(path, header)
      return set()
    raise ValueError(f"{os.fspath(path)!r} has no header line; expected {header.strip()!r}")
  first = text.split("\n", 1)[0]
  names = _split_header(first)
  got_extra = _check_header(names, kind, path)
  if tuple(got_extra) != tuple(extra_columns):
    raise ValueError(f"{os.fspath(path)!r} has extra columns {got_extra}, expected {list(extra_columns)}")
  body = data[:end].decode("utf-8", errors="replace").split("\n")[1:-1]
  done = set(_parse_rows(path, body, names)["idx"])  # checked before the repair
  if end < len(data):
    with open(path, "r+b") as f:
      f.truncate(end)
      f.flush()
      os.fsync(f.fileno())
  return done


_resume = resume

RUN_RECORD_SUFFIX = ".run.json"


class RunMismatchError(ValueError):
  """A result file holds rows of another run (its run record differs)."""


class ResultsLockedError(RuntimeError):
  """Another writer holds the lock of a result file."""


def run_record_path(path) -> str:
  """The run record kept next to a result file: ``<path>.run.json``."""
  return os.fspath(path) + RUN_RECORD_SUFFIX


def read_run_record(path) -> dict | None:
  """The run record of a result file, or None if it has none."""
  rec = run_record_path(path)
  if not os.path.exists(rec):
    return None
  with open(rec, encoding="utf-8") as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f"run record {rec!r} is not valid JSON ({e})") from None


def write_run_record(path, run: Mapping) -> None:
  """Writes the run record of a result file atomically (temporary file, fsync, rename)."""
  rec = run_record_path(path)
  tmp = f"{rec}.tmp-{os.getpid()}"
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump(dict(run), f, indent=1, sort_keys=True)
    f.write("\n")
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, rec)
  _fsync_dir(rec)


def _has_rows(path) -> bool:
  """Whether the file holds at least one complete row after its header."""
  if not os.path.exists(path):
    return False
  with open(path, "rb") as f:
    return f.read().count(b"\n") >= 2


def _check_run(path, run: Mapping) -> None:
  """Raises :class:`RunMismatchError` if the rows in ``path`` come from another run."""
  if not _has_rows(path):
    return
  saved = read_run_record(path)
  p = os.fspath(path)
  if saved is None:
    raise RunMismatchError(
        f"{p!r} has rows but no run record ({os.path.basename(run_record_path(p))}), so it cannot "
        "be told apart from another run; start over (--overwrite) or write to another file")
  run = json.loads(json.dumps(dict(run)))  # as it would be read back
  saved_flat, run_flat = _flatten(saved), _flatten(run)
  diff = [k for k in sorted(set(saved_flat) | set(run_flat))
          if saved_flat.get(k) != run_flat.get(k)]
  # Entries of nested records (the certificate header) follow from the top-level
  # settings: name them only when no top-level setting differs.
  top = [k for k in diff if "." not in k]
  if diff:
    what = "; ".join(f"{k} {saved_flat.get(k)!r} in the file, {run_flat.get(k)!r} now"
                     for k in (top or diff))
    raise RunMismatchError(
        f"{p!r} holds another run ({what}); start over (--overwrite) or write to another file")


def _flatten(record: Mapping, prefix: str = "") -> dict:
  """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists and scalars are leaves)."""
  out = {}
  for k, v in record.items():
    if isinstance(v, Mapping) and v:
      out.update(_flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def _lock(path) -> int | None:
  """Opens (creating) ``path`` and takes an exclusive lock; returns the descriptor."""
  if os.path.exists(path) and not os.path.isfile(path):
    kind = "a directory" if os.path.isdir(path) else "not a regular file"
    raise IsADirectoryError(21 if os.path.isdir(path) else 22,
                            f"cannot write results: {kind}", os.fspath(path))
  fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
  if fcntl is None:
    return fd
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    os.close(fd)
    raise ResultsLockedError(
        f"{os.fspath(path)!r} is being written by another run (it is locked); wait for that run "
        "or write to another file") from None
  return fd


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

  def __init__(self, path, *, kind: str = "certify", resume: bool = True,
               extra_columns: Sequence[str] = (), run: Mapping | None = None):
    """Opens a result file for appending, holding its lock until :meth:`close`.

    Args:
      path: the file.
      kind: ``"certify"`` or ``"predict"``.
      resume: if True (default) keep the rows already there (dropping a
        truncated last line) and refuse to write their ``idx`` again; if False
        start a new file, replacing any existing one.
      extra_columns: names of extra columns written after the standard ones.
      run: optional JSON-serializable identity of the run, kept in
        ``<path>.run.json``. Rows already in the file are resumed only if
        their record equals ``run``.

    Raises:
      ResultsLockedError: another writer has the file open.
      RunMismatchError: ``resume`` and the rows in the file come from another
        run (the message names the differing fields), or from an unknown run.
      ValueError: a malformed row (see :func:`resume`).
      OSError: the file cannot be created or written.
    """
    self.kind = kind
    self.columns = _check_kind(kind) + tuple(extra_columns)
    self.extra_columns = tuple(extra_columns)
    self.path = os.fspath(path)
    self._lock_fd = _lock(self.path)
    try:
      if resume:
        if run is not None:
          _check_run(path, run)
        self.done = _resume(path, kind=kind, extra_columns=extra_columns)
      else:
        _write_header(path, "\t".join(self.columns) + "\n")
        self.done = set()
      if run is not None:
        write_run_record(path, run)
      self._f = open(path, "a", encoding="utf-8", newline="")
    except BaseException:
      os.close(self._lock_fd)
      raise

  def write(self, *, idx, label, predict, radius=None, time=0.0, **extra) -> None:
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
    fields.append(str(int(predict == label)))
    fields.append(_fmt_float(time))
    fields.extend(str(extra[name]) for name in self.extra_columns)
    try:
      self._f.write("\t".join(fields) + "\n")
      self._f.flush()
      os.fsync(self._f.fileno())
    except OSError as e:  # e.g. a full disk: name the file
      raise OSError(e.errno, e.strerror, self.path) from e
    self.done.add(idx)

  def write_many(self, *, idx: Iterable, label: Iterable, predict: Iterable, radius=None,
                 time=0.0, **extra) -> None:
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
      self.write(idx=idx[j], label=label[j], predict=predict[j],
                 radius=None if radius is None else radius[j], time=float(time[j]),
                 **{k: v[j] for k, v in extra.items()})

  def close(self) -> None:
    """Closes the file and releases its lock."""
    if not self._f.closed:
      self._f.close()
      os.close(self._lock_fd)

  def __enter__(self) -> ResultsWriter:
    return self

  def __exit__(self, *exc) -> None:
    self.close()
