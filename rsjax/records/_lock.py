"""One writer at a time: an exclusive ``fcntl`` lock on a result file."""

from __future__ import annotations

import os

try:
  import fcntl
except ImportError:  # not POSIX: no lock
  fcntl = None


class ResultsLockedError(RuntimeError):
  """Another writer holds the lock of a result file."""


def lock(path: str | os.PathLike) -> int | None:
  """Opens (creating) ``path`` and takes an exclusive lock; returns the descriptor."""
  if os.path.exists(path) and not os.path.isfile(path):
    kind = "a directory" if os.path.isdir(path) else "not a regular file"
    raise IsADirectoryError(
      21 if os.path.isdir(path) else 22, f"cannot write results: {kind}", os.fspath(path)
    )
  fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
  if fcntl is None:
    return fd
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    os.close(fd)
    raise ResultsLockedError(
      f"{os.fspath(path)!r} is being written by another run (it is locked); wait for that run "
      "or write to another file"
    ) from None
  return fd
