"""Durable writes: a file's bytes and its directory entry reach the disk."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from typing import Any, BinaryIO


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


def atomic_write(path: str | os.PathLike[str], write: Callable[[BinaryIO], object]) -> None:
  """Replaces ``path`` by what ``write(f)`` writes to the binary file ``f``, atomically.

  The one way rsjax replaces a file: ``write`` fills a temporary file beside
  ``path``, which is fsynced, renamed over ``path`` and its directory fsynced, so
  a reader sees the old file or the new one, never a part, and the new one
  survives a crash. If ``write`` raises, ``path`` is left as it was and the
  temporary file removed. For arrays:
  ``atomic_write(path, lambda f: np.savez(f, mu=mu, sigma=sigma))`` (given a file,
  ``np.savez`` adds no ``.npz`` suffix).
  """
  path = os.fspath(path)
  tmp = f"{path}.tmp-{os.getpid()}"
  try:
    with open(tmp, "wb") as f:
      write(f)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    with contextlib.suppress(OSError):
      os.remove(tmp)
    raise
  fsync_dir(path)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
  """Replaces ``path`` by ``text`` (UTF-8, newlines as given) atomically (:func:`atomic_write`)."""
  data = text.encode("utf-8")
  atomic_write(path, lambda f: f.write(data))


def write_json(path: str | os.PathLike, obj: Any) -> None:
  """Replaces ``path`` by ``obj`` as indented JSON with sorted keys, atomically
  (:func:`atomic_write_text`)."""
  atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")
