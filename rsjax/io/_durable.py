"""Durable writes: a file's bytes and its directory entry reach the disk."""

from __future__ import annotations

import json
import os
from typing import Any


def fsync_dir(path: str | os.PathLike) -> None:
  """Makes the directory entry of ``path`` durable (best effort: not every system can)."""
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


def write_header(path: str | os.PathLike, header: str) -> None:
  """Replaces ``path`` by the one line ``header``, durably."""
  with open(path, "w", encoding="utf-8", newline="") as f:
    f.write(header)
    f.flush()
    os.fsync(f.fileno())
  fsync_dir(path)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
  """Replaces ``path`` by ``text`` atomically (temporary file, fsync, rename, fsync of the
  directory): a reader sees the old file or the new one, never a part."""
  path = os.fspath(path)
  tmp = f"{path}.tmp-{os.getpid()}"
  with open(tmp, "w", encoding="utf-8", newline="") as f:
    f.write(text)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)
  fsync_dir(path)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
  """:func:`atomic_write_text` for bytes (e.g. an ``np.savez`` archive)."""
  path = os.fspath(path)
  tmp = f"{path}.tmp-{os.getpid()}"
  with open(tmp, "wb") as f:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)
  fsync_dir(path)


def write_json(path: str | os.PathLike, obj: Any) -> None:
  """Replaces ``path`` by ``obj`` as indented JSON with sorted keys, atomically
  (:func:`atomic_write_text`)."""
  atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")
