"""What every command's parser shares: one-line usage errors (:class:`CliError`, and a
library's ``RunError`` told in flags: :func:`flag_message`), defaults in the help, and
``--debug`` after the command. The flags of certify and predict (and the value types
of every command) are declared in :mod:`rsjax.app.cli.flags`."""

from __future__ import annotations

import argparse
import re
from typing import NoReturn

__all__ = [
  "CliError",
  "Parser",
  "HelpFormatter",
  "common_flags",
  "flag_message",
  "parent_flag",
  "torch_module_flag",
]


class CliError(Exception):
  """An error reported to the user as one line, exit status 2."""


# The arguments of rsjax.app.launch.prepare / run that a message names -> their flags.
FLAGS = {"model": "MODEL_DIR", "options": "--method", "stop": "--max"} | {
  a: "--" + a.replace("_", "-")
  for a in ("dataset", "sigma", "resize", "pack", "denoiser", "normalize", "method", "start")
  + ("save_counts", "noise", "multiclass", "grid")
}


def flag_message(e: BaseException) -> str:
  """The message of a library ``RunError`` in the command's words: the argument it starts
  with, and every ``name=value`` in it, as its flag (``pack=4:`` -> ``--pack 4:``,
  ``multiclass=True`` -> ``--multiclass``)."""
  text, name = str(e), getattr(e, "argument", None)
  if not hasattr(e, "argument"):  # not a RunError: as it is
    return text
  if name in FLAGS and re.match(rf"{name}\b(?!=)", text):
    text = FLAGS[name] + text[len(name) :]
  return re.sub(
    r"\b(\w+)=(True\b)?",
    lambda m: (FLAGS[m[1]] + ("" if m[2] else " ")) if m[1] in FLAGS else m[0],
    text,
  )


DEBUG_HELP = "show the full traceback of an error instead of one line"


class Parser(argparse.ArgumentParser):
  """An argument parser whose usage errors are one line."""

  def error(self, message: str) -> NoReturn:
    self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


class HelpFormatter(argparse.HelpFormatter):
  """Adds each flag's default to its help, unless the help already tells it."""

  def _get_help_string(self, action: argparse.Action) -> str:
    text = action.help or ""
    if (
      not action.option_strings
      or "default" in text
      or any(action.default is v for v in (None, False, argparse.SUPPRESS))
    ):
      return text
    return text + " (default: %(default)s)"


def common_flags() -> argparse.ArgumentParser:
  """The parent parser of every command: ``--debug`` also after the command (SUPPRESS:
  unset there, the top-level default stays)."""
  common = argparse.ArgumentParser(add_help=False)
  common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
  return common


def parent_flag(p: argparse.ArgumentParser) -> None:
  """``--parent FILE`` of ``verify`` and ``audit``: where a recertified run's parent is now."""
  p.add_argument(
    "--parent",
    default=None,
    metavar="FILE",
    help="a recertified run's parent result file, where it was moved (default: the one its "
    "record names, relative to the result file's folder)",
  )


def torch_module_flag(q: argparse._ActionsContainer, verb: str) -> None:
  """``--torch-module SPEC``: any PyTorch module through ``torch.export`` (``rsjax certify``,
  ``predict``, ``bench``, ``convert``: ``verb`` says what is done with it)."""
  q.add_argument(
    "--torch-module",
    default=None,
    metavar="SPEC",
    help=f"{verb} any PyTorch module through torch.export: FILE.pt (torch.save'd, trusted "
    "files only) or FILE.py:CLASS (weights: --torch-checkpoint); needs rsjax[torch]",
  )
