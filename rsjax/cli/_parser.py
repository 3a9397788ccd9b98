"""The ``rsjax`` parser: global flags, then one subcommand per module of this package, named
after it (``train_denoiser``: ``rsjax train-denoiser``), with the module's ``HELP``, its
``add_arguments`` and its ``run``."""

from __future__ import annotations

import argparse

from rsjax.cli import (analyze, audit, certify, convert, demo, predict, train, train_denoiser,
                       verify)
from rsjax.cli._args import DEBUG_HELP, HelpFormatter, Parser, common_flags

__all__ = ["build_parser", "COMMANDS"]

# The commands in the order of ``rsjax --help``.
COMMANDS = (train, certify, predict, analyze, verify, audit, convert, train_denoiser, demo)


def build_parser() -> argparse.ArgumentParser:
  """The parser of every command; each sets ``func`` (its module's ``run``)."""
  from rsjax import __version__
  p = Parser(
      prog="rsjax", description="Randomized smoothing in JAX: train, certify, predict, analyze.",
      formatter_class=HelpFormatter)
  p.add_argument("--version", action="version", version=f"rsjax {__version__}")
  p.add_argument("--compilation-cache", default=None, metavar="DIR",
                 help="directory of JAX's persistent compilation cache, or 'off' (or "
                 "$RSJAX_COMPILATION_CACHE; default: $XDG_CACHE_HOME/rsjax/jax, i.e. "
                 "~/.cache/rsjax/jax)")
  p.add_argument("--debug", action="store_true", help=DEBUG_HELP)
  sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
  common = common_flags()
  for command in COMMANDS:
    name = command.__name__.rsplit(".", 1)[1].replace("_", "-")
    q = sub.add_parser(name, parents=[common], formatter_class=HelpFormatter, help=command.HELP)
    command.add_arguments(q)
    q.set_defaults(func=command.run)
  return p
