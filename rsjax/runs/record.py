"""The certificate record: what a third party needs to check a certify run.

A certify run writes three files side by side:

* ``<file>`` -- the rows in Cohen et al.'s format (``rsjax.records.io``), read by any
  TSV reader as before;
* ``<file>.run.json`` -- the run record, the one value of the run
  (``rsjax.records.spec.RunSpec``): what holds for every row (model fingerprint,
  dataset and declared index range, sigma, sampling settings, method and
  options, key derivation, versions);
* ``<file>.cert.jsonl`` -- one JSON object per row (:func:`row`): ``idx``,
  the selection counts ``counts0`` and estimation counts ``counts`` (sparse,
  ``{class: count}``; ``n_A`` and the runner-up follow from them), the number
  of estimation samples used ``n``, the lower bound ``p_lower`` and the
  fingerprint ``input`` of the input image.

``rsjax.verify`` recomputes every radius from these files with SciPy alone;
``rsjax.app.audit`` re-draws the counts of chosen rows with the model.

Writing is as durable as the rows: each record line is flushed and fsynced
before its TSV row, so every row in the TSV has its record; on resume
(:class:`RecordWriter`) record lines whose row is not in the TSV (a crash in
between) are dropped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from rsjax.records._durable import atomic_write_text
from rsjax.records.sampling import RunSampling

__all__ = [
  "RECORD_SUFFIX",
  "RecordWriter",
  "input_fingerprint",
  "read_records",
  "record_path",
  "row",
  "run_sampling",
  "versions",
]

RECORD_SUFFIX = ".cert.jsonl"


def record_path(path: str | os.PathLike) -> str:
  """The certificate record kept next to a result file: ``<path>.cert.jsonl``."""
  return os.fspath(path) + RECORD_SUFFIX


def versions() -> dict:
  """Versions of the software that computed the counts and the radii."""
  import importlib.metadata as md

  import scipy

  try:
    rsjax_version = md.version("rsjax")
  except md.PackageNotFoundError:
    rsjax_version = "0+unknown"
  out = {"rsjax": rsjax_version, "numpy": np.__version__, "scipy": scipy.__version__}
  for name in ("jax", "jaxlib"):
    try:
      out[name] = md.version(name)
    except md.PackageNotFoundError:
      out[name] = None
  return out


def input_fingerprint(x: ArrayLike) -> str:
  """A short hash of one input (its float32 values and shape): ``"sha256:<16 hex>"``."""
  a = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
  h = hashlib.sha256(f"{a.shape}|".encode())
  h.update(a.tobytes())
  return "sha256:" + h.hexdigest()[:16]


def _jsonable(v):
  if dataclasses.is_dataclass(v) and not isinstance(v, type):
    return getattr(v, "name", None) or repr(v)
  if isinstance(v, (np.generic,)):
    return v.item()
  if isinstance(v, tuple):
    return [_jsonable(u) for u in v]
  if v is None or isinstance(v, (bool, int, float, str, list, dict)):
    return v
  try:  # a dtype or a scalar type (Sampling.compute_dtype): its name, e.g. "bfloat16"
    return np.dtype(v).name
  except TypeError:
    return str(v)


#: Sampling fields that change how fast counts come, never the counts (rsjax's
#: reproducibility contract): not part of a run's identity, so a run resumes with
#: another batch size or device count.
SPEED_ONLY = frozenset({"batch_size", "devices"})


def run_sampling(sampling: Any, *, pack: int = 1) -> RunSampling:
  """What a run record states of an ``rsjax.Sampling``: its fields but :data:`SPEED_ONLY`
  (the noise by name, a dtype by its name), and the model's packing ``pack``.

  Generic on purpose: a field added to ``Sampling`` (e.g. a compute precision) needs
  only its field in ``RunSampling``.
  """
  fields = {
    f.name: noise_name(v) if f.name == "noise" else _jsonable(v)
    for f in dataclasses.fields(sampling)
    if f.name not in SPEED_ONLY
    for v in [getattr(sampling, f.name)]
  }
  return RunSampling(**fields, pack=pack)


def noise_name(noise: Any) -> str:
  """The registry name (``rsjax.noise.NOISES``) of a noise family, e.g. ``"uniform_linf"``."""
  from rsjax import noise as noise_lib

  for name, n in noise_lib.NOISES.items():
    if n == noise:
      return name
  return repr(noise)


def _sparse(counts) -> dict | None:
  if counts is None:
    return None
  c = np.asarray(counts).reshape(-1)
  return {str(k): int(c[k]) for k in np.flatnonzero(c)}


def row(cert: Any, j: int, x_j: ArrayLike, *, n: int | None = None) -> dict:
  """The record of row ``j`` of a certificate (its counts, bound and input fingerprint).

  Args:
    cert: an ``rsjax.Certificate`` (or a method's subclass).
    j: the row in ``cert``.
    x_j: the input ``[*input_shape]``.
    n: estimation samples per input (used unless the certificate records its
      own per-input ``num_samples``, as budgeted CERTIFY does).
  """
  counts = getattr(cert, "counts", None)
  counts0 = getattr(cert, "counts_selection", None)
  used = getattr(cert, "num_samples", None)
  out = {
    "counts0": None if counts0 is None or np.ndim(counts0) != 2 else _sparse(counts0[j]),
    "counts": None if counts is None or np.ndim(counts) != 2 else _sparse(counts[j]),
    "n": int(used[j]) if used is not None else (None if n is None else int(n)),
    "p_lower": float(cert.p_lower[j]) if getattr(cert, "p_lower", None) is not None else None,
    "input": input_fingerprint(x_j),
  }
  return out


def _read_lines(path) -> tuple[list[dict], int]:
  """The complete, valid JSON lines of a record (and the byte length they take)."""
  with open(path, "rb") as f:
    data = f.read()
  out, end = [], 0
  for line in data.split(b"\n")[:-1]:  # the part after the last newline is incomplete
    try:
      rec = json.loads(line)
    except json.JSONDecodeError:
      break
    out.append(rec)
    end += len(line) + 1
  return out, end


def read_records(path: str | os.PathLike) -> dict[int, dict]:
  """The row records of a result file, by ``idx`` (``{}`` when it has none).

  Raises:
    ValueError: a line that is not a JSON object with a JSON integer ``idx`` in
      ``0..rsjax.runs.limits.MAX_INDEX``, or an ``idx`` recorded twice with different contents
      (naming the file and line).
  """
  from rsjax.records import limits

  rec = record_path(path)
  if not os.path.exists(rec):
    return {}
  out: dict[int, dict] = {}
  from rsjax.records._format import read_text

  lines = read_text(rec, "certificate record").split("\n")
  if lines and lines[-1] == "":
    lines.pop()
  try:  # one parse of the whole file (fast); a bad line is found line by line below
    parsed = json.loads("[" + ",".join(lines) + "]")
  except (json.JSONDecodeError, RecursionError):
    parsed = None
  for lineno, line in enumerate(lines, start=1):
    try:
      r = parsed[lineno - 1] if parsed is not None else json.loads(line)
      if not isinstance(r, dict):
        raise TypeError
    except (json.JSONDecodeError, TypeError, ValueError, RecursionError):
      if lineno == len(lines) and parsed is None:
        break  # an incomplete last line (a crash mid-write)
      raise ValueError(
        f"certificate record {rec!r} line {lineno} is not a row record (a JSON object)"
      ) from None
    try:
      idx = limits.json_int(r.get("idx"), "idx", 0, limits.MAX_INDEX)
    except limits.FieldError as e:
      if lineno == len(lines) and parsed is None:
        break  # an incomplete last line (a crash mid-write)
      raise ValueError(f"certificate record {rec!r} line {lineno}: {e}") from None
    if idx in out and out[idx] != r:
      raise ValueError(
        f"certificate record {rec!r} line {lineno}: idx {idx} recorded twice, differently"
      )
    out[idx] = r
  return out


class RecordWriter:
  """Appends row records to ``<path>.cert.jsonl``, each flushed and fsynced.

  Opened after the TSV's ``rsjax.records.io.ResultsWriter`` (whose lock covers it) with
  the set of rows already in the TSV: record lines of other rows are dropped,
  so the record and the TSV hold the same rows.
  """

  def __init__(self, path: str | os.PathLike, done: Iterable[int] = frozenset()) -> None:
    self.path = record_path(path)
    done = set(int(i) for i in done)
    keep: list[dict] = []
    if os.path.exists(self.path) and done:
      lines, _ = _read_lines(self.path)
      seen = set()
      for r in lines:
        i = r.get("idx")
        if i in done and i not in seen:
          keep.append(r)
          seen.add(i)
    atomic_write_text(self.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in keep))
    self.missing = done - {r["idx"] for r in keep}
    self._f = open(self.path, "a", encoding="utf-8")

  def write(self, idx: int, fields: Mapping) -> None:
    """Appends the record of row ``idx`` and makes it durable."""
    self._f.write(json.dumps({"idx": int(idx), **fields}, sort_keys=True) + "\n")
    self._f.flush()
    os.fsync(self._f.fileno())

  def close(self) -> None:
    if not self._f.closed:
      self._f.close()

  def __enter__(self) -> RecordWriter:
    return self

  def __exit__(self, *exc: object) -> None:
    self.close()


def merge(paths: Iterable[str | os.PathLike], out_path: str | os.PathLike) -> None:
  """Merges the records of per-process rows files into the record of ``out_path``."""
  rows: dict[int, dict] = {}
  for p in paths:
    rows.update(read_records(p))
  atomic_write_text(
    record_path(out_path), "".join(json.dumps(rows[i], sort_keys=True) + "\n" for i in sorted(rows))
  )
