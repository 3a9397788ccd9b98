"""The run record kept next to a result file, and the check that rows come from one run."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from rsjax.records._durable import atomic_write_text
from rsjax.records.spec import RunFormatError, RunSpec
from rsjax.records.spec import run_path as run_record_path


class RunMismatchError(ValueError):
  """A result file holds rows of another run (its run record differs)."""


def read_run_record(path: str | os.PathLike) -> dict | None:
  """The run record of a result file, or None if it has none."""
  rec = run_record_path(path)
  if not os.path.exists(rec):
    return None
  with open(rec, encoding="utf-8") as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f"run record {rec!r} is not valid JSON ({e})") from None


def write_run_record(path: str | os.PathLike, run: Any) -> None:
  """Writes the run record of a result file atomically: an ``rsjax.records.spec.RunSpec``, or
  the JSON identity of another kind of run (a dict)."""
  if isinstance(run, RunSpec):
    run.write(path)
    return
  atomic_write_text(run_record_path(path), json.dumps(dict(run), indent=1, sort_keys=True) + "\n")


def _has_rows(path) -> bool:
  """Whether the file holds at least one complete row after its header."""
  if not os.path.exists(path):
    return False
  with open(path, "rb") as f:
    return f.read().count(b"\n") >= 2


def check_run(path: str | os.PathLike, run: Any) -> None:
  """Raises :class:`RunMismatchError` if the rows in ``path`` come from another run.

  ``run`` is an ``rsjax.records.spec.RunSpec`` (its identity is compared: the record
  but versions and paths) or the JSON identity of another kind of run.
  """
  if not _has_rows(path):
    return
  saved = read_run_record(path)
  p = os.fspath(path)
  if saved is None:
    raise RunMismatchError(
      f"{p!r} has rows but no run record ({os.path.basename(run_record_path(p))}), so it cannot "
      "be told apart from another run; start over (--overwrite) or write to another file"
    )
  if isinstance(run, RunSpec):
    try:
      saved = RunSpec.from_json(saved, out=p).identity()
    except RunFormatError as e:
      raise RunMismatchError(str(e)) from None
    run = run.identity()
    name = _spec_name
  else:
    name = str
  run = json.loads(json.dumps(dict(run)))  # as it would be read back
  saved_flat, run_flat = _flatten(saved), _flatten(run)
  diff = [
    k for k in sorted(set(saved_flat) | set(run_flat)) if saved_flat.get(k) != run_flat.get(k)
  ]
  # Entries of nested records (the certificate header) follow from the top-level
  # settings: name them only when no top-level setting differs.
  top = [k for k in diff if "." not in k]
  if diff:
    what = "; ".join(
      f"{name(k)} {saved_flat.get(k)!r} in the file, {run_flat.get(k)!r} now" for k in (top or diff)
    )
    raise RunMismatchError(
      f"{p!r} holds another run ({what}); start over (--overwrite) or write to another file"
    )


def _spec_name(key: str) -> str:
  """A flattened key of a run record as the user knows it: ``sampling.n`` -> ``n``,
  ``sigma.value`` -> ``sigma``, ``method.options.idrs_k`` -> ``idrs_k``."""
  if key == "method.name":
    return "method"
  for prefix in ("sampling.", "method.options.", "method.", "data.", "key."):
    if key.startswith(prefix):
      return key[len(prefix) :]
  return key.removesuffix(".value")


def _flatten(record: Mapping, prefix: str = "") -> dict:
  """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists and scalars are leaves)."""
  out = {}
  for k, v in record.items():
    if isinstance(v, Mapping) and v:
      out.update(_flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out
