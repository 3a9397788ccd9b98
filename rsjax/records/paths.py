"""Where the files a run names are: recorded relative to the result file's folder.

A run record names files besides its model: a Dual RS run its experts (``--dual-experts``),
a recertified child its parent run (``parent``), every run its model directory
(``model.path``). Certify records each path relative to the folder of the result file
(:func:`relative_to`), so the record reads the same wherever the run is certified from;
``rsjax verify`` and ``rsjax audit`` resolve it against the result file's folder
(:func:`resolve`), never against the directory they run in, so an honest run checks
from any directory. A reader who moved a file gives it (:func:`locator`'s ``moved``:
``--experts-dir``, ``--parent``, ``--parent-model-dir``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

__all__ = ["EXPERTS_DIR", "find", "locator", "relative_to", "resolve"]

#: The role of a folder holding moved experts, looked up in it by their folder names.
EXPERTS_DIR = "experts_dir"


def _folder(result_file: str | os.PathLike) -> str:
  """The absolute folder of a result file."""
  return os.path.dirname(os.path.abspath(os.fspath(result_file)))


def relative_to(path: str | os.PathLike, result_file: str | os.PathLike) -> str:
  """``path`` (as given: relative to the working directory, or absolute) relative to the
  folder of ``result_file``, as certify records it."""
  return os.path.relpath(os.path.abspath(os.fspath(path)), _folder(result_file))


def resolve(recorded: str | os.PathLike, result_file: str | os.PathLike | None) -> str:
  """A recorded path resolved against the folder of ``result_file`` (an absolute one, or
  one of a run without a result file, as it is)."""
  p = os.fspath(recorded)
  if os.path.isabs(p) or result_file is None:
    return p
  return os.path.normpath(os.path.join(_folder(result_file), p))


def locator(
  result_file: str | os.PathLike | None, moved: Mapping[str, str | None] | None = None
) -> Callable[[str, str], str]:
  """``locate(role, recorded) -> path``: where a file a run names is now.

  Args:
    result_file: the run's result file (paths resolve against its folder).
    moved: what a reader gives for moved files, by role: ``"expert"`` ... any role maps
      to the file itself, but :data:`EXPERTS_DIR`, a folder in which each expert is looked
      up by its folder's name. None values are not given.

  Returns:
    The function methods map their recorded paths with (``rsjax.runs.method.Method.paths``).
  """
  moved = {k: v for k, v in (moved or {}).items() if v is not None}

  def locate(role: str, recorded: str) -> str:
    if role == "expert" and EXPERTS_DIR in moved:
      return os.path.join(moved[EXPERTS_DIR], os.path.basename(os.path.normpath(recorded)))
    if role in moved:
      return os.fspath(moved[role])
    return resolve(recorded, result_file)

  return locate


#: The flag of ``rsjax verify`` / ``audit`` that gives a moved file, by role.
FLAGS = {
  "expert": "--experts-dir DIR",
  "parent": "--parent FILE",
  EXPERTS_DIR: "--experts-dir DIR",
  "parent_model": "--parent-model-dir DIR",
}


def find(
  located: Callable[[Mapping, Callable[[str, str], str]], dict],
  options: Mapping,
  result_file: str,
  moved: Mapping[str, str | os.PathLike | None],
) -> dict[str, str]:
  """Where the files a run names are now, each checked to be there.

  Args:
    located: ``located(options, locate) -> options`` (``rsjax.runs.method.Method.located``).
    options: the run's options as recorded.
    result_file: the run's result file.
    moved: what the reader gives, by role (:func:`locator`); None values are not given.

  Returns:
    ``moved`` (the given ones), with ``"parent"`` where the options name a parent run.

  Raises:
    FileNotFoundError: a file the run names, or one given, is not there (one line naming
      it and the flag that gives it).
  """
  given = {k: os.fspath(v) for k, v in moved.items() if v is not None}
  for role, where in given.items():
    if not os.path.exists(where):
      raise FileNotFoundError(f"{FLAGS.get(role, role)}: {where!r} is not there")
  locate, found = locator(result_file, given), dict(given)

  def check(role: str, recorded: str) -> str:
    where = locate(role, recorded)
    if not os.path.exists(where):
      raise FileNotFoundError(
        f"the run's {role} {recorded!r} is not at {where!r}: give it with "
        f"{FLAGS.get(role, 'its flag')}"
      )
    if role == "parent":
      found["parent"] = where
    return where

  located(options, check)
  return found
