"""What every command's parser shares: one-line usage errors, defaults in the help, and
``--debug`` after the command. The flags of certify and predict (and the value types
of every command) are declared in :mod:`rsjax.app.launch.flags`."""

from __future__ import annotations

import argparse
from typing import NoReturn

__all__ = ["Parser", "HelpFormatter", "common_flags"]

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
