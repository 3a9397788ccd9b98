"""The ``rsjax`` command: train, certify, predict, analyze, verify, audit, convert,
train-denoiser, demo.

One module per command (``rsjax.app.cli.certify``, ...), each with its ``HELP``,
its ``add_arguments`` and its ``run``; :mod:`rsjax.app.cli._parser` puts them
together and :mod:`rsjax.app.cli._main` runs one. The flags of certify and predict are declared
in :mod:`rsjax.app.cli.flags`, which builds their run with ``rsjax.app.launch.prepare``; a
library's ``RunError`` is told in one line in the words of the flags (``_args.flag_message``).

Global JAX configuration (compilation cache) is set in ``main`` only, never at
import of the library.
"""

from rsjax.app.cli._args import CliError as CliError
from rsjax.app.cli._main import compilation_cache_dir as compilation_cache_dir
from rsjax.app.cli._main import main as main
from rsjax.app.cli._parser import build_parser as build_parser

__all__ = ["main", "build_parser", "CliError", "compilation_cache_dir"]
