"""The ``rsjax`` parser: global flags, then one subcommand per module of this package, named
after it (``train_denoiser``: ``rsjax train-denoiser``), with the module's ``HELP``, its
``add_arguments`` and its ``run``."""

from __future__ import annotations

import argparse
import importlib

from rsjax.app.cli._args import DEBUG_HELP, HelpFormatter, Parser, common_flags

__all__ = ["build_parser", "COMMANDS"]

# The commands (modules of this package) in the order of ``rsjax --help``; each is
# imported when its parser is built, so ``rsjax verify`` imports only its own.
COMMANDS = (
  "train",
  "certify",
  "recertify",
  "predict",
  "analyze",
  "verify",
  "audit",
  "convert",
  "train_denoiser",
  "demo",
  "bench",
)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
  """The parser of every command (or of command ``only``); each sets ``func`` (its
  module's ``run``)."""
  from rsjax import __version__

  p = Parser(
    prog="rsjax",
    description="Randomized smoothing in JAX: train, certify, predict, analyze.",
    formatter_class=HelpFormatter,
  )
  p.add_argument("--version", action="version", version=f"rsjax {__version__}")
  p.add_argument(
    "--compilation-cache",
    "--cache-dir",
    dest="compilation_cache",
    default=None,
    metavar="DIR",
    help="directory of JAX's persistent compilation cache, or 'off' (or "
    "$RSJAX_COMPILATION_CACHE; default: $XDG_CACHE_HOME/rsjax/jax, i.e. "
    "~/.cache/rsjax/jax)",
  )
  p.add_argument("--debug", action="store_true", help=DEBUG_HELP)
  sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
  common = common_flags()
  for module in COMMANDS:
    name = module.replace("_", "-")
    if only is not None and name != only:
      continue
    command = importlib.import_module(f"rsjax.app.cli.{module}")
    q = sub.add_parser(name, parents=[common], formatter_class=HelpFormatter, help=command.HELP)
    command.add_arguments(q)
    q.set_defaults(func=command.run)
  return p
