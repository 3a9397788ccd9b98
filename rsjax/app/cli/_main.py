"""Running a command: global JAX configuration, warnings and errors as one line each.

Global JAX configuration (compilation cache) is set here, in ``main`` only,
never at import of the library.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TextIO

from rsjax.app.cli._args import CliError, flag_message
from rsjax.app.cli._parser import COMMANDS, build_parser

__all__ = ["JAX_FREE", "main", "compilation_cache_dir", "enable_compilation_cache"]

#: Commands that never import JAX (the parser of the others does).
JAX_FREE = frozenset({"verify", "analyze"})


def compilation_cache_dir(flag: str | None, environ: Mapping[str, str] = os.environ) -> str | None:
  """The persistent compilation cache of the command: ``--compilation-cache``, else
  ``$RSJAX_COMPILATION_CACHE``, else ``$XDG_CACHE_HOME/rsjax/jax`` (``~/.cache/rsjax/jax``);
  ``off`` (or ``none``) turns it off. None: off, or left to ``$JAX_COMPILATION_CACHE_DIR``."""
  from rsjax.data import cache_dir

  value = flag if flag is not None else environ.get("RSJAX_COMPILATION_CACHE")
  if value is None and environ.get("JAX_COMPILATION_CACHE_DIR"):
    return None  # JAX reads it itself
  return cache_dir(value, "jax", environ)


def enable_compilation_cache(cache: str) -> None:
  """Turns on JAX's persistent compilation cache in ``cache`` for this process: every
  compiled program that took 0.5 s or more, and XLA's own caches inside it (the
  GPU per-fusion autotune results) where this JAX has the option."""
  import jax

  jax.config.update("jax_compilation_cache_dir", cache)
  # Programs that compile in under 0.5 s are not worth a file in the user's cache.
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
  if "jax_persistent_cache_enable_xla_caches" in jax.config.values:
    jax.config.update(
      "jax_persistent_cache_enable_xla_caches", "xla_gpu_per_fusion_autotune_cache_dir"
    )


def _setup_jax(args: argparse.Namespace) -> None:
  cache = compilation_cache_dir(getattr(args, "compilation_cache", None))
  if cache:
    enable_compilation_cache(cache)


def _command(argv: Sequence[str]) -> str | None:
  """The command ``argv`` names (its first word that is neither a global flag nor the value of
  ``--compilation-cache`` / ``--cache-dir``); None when there is none or ``--help`` comes before it."""
  words = iter(argv)
  for word in words:
    if word in ("-h", "--help"):
      return None
    if word in ("--compilation-cache", "--cache-dir"):
      next(words, None)
    elif not word.startswith("-"):
      return word
  return None


class Terminated(KeyboardInterrupt):
  """SIGTERM, raised in the main thread as an interrupt is: a command ends as on Ctrl-C (what
  it wrote is kept, its message says so) instead of silently."""


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
  """SIGTERM raises :class:`Terminated` while the command runs (main thread only); the
  previous handler is restored after."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return

  def handler(signum: int, frame: Any) -> None:
    del signum, frame
    raise Terminated("SIGTERM")

  previous = signal.signal(signal.SIGTERM, handler)
  try:
    yield
  finally:
    signal.signal(signal.SIGTERM, previous)


def _interrupted(command: str, e: KeyboardInterrupt) -> int:
  """Tells an interrupt (Ctrl-C, or SIGTERM) on one line, with what the command says it kept
  (the interrupt's message, where it gives one); the exit status 130, or 143 for SIGTERM."""
  how = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
  kept = str(e) if e.args and str(e) != "SIGTERM" else ""
  print(f"rsjax {command}: {how}" + (f"; {kept}" if kept else ""), file=sys.stderr)
  return 143 if isinstance(e, Terminated) else 130


def _one_line(e: BaseException) -> str:
  """The message of an error as one line (an OSError names its file)."""
  if isinstance(e, OSError) and e.strerror:
    text = f"{e.strerror}: {e.filename!r}" if e.filename else e.strerror
  else:
    text = flag_message(e) or type(e).__name__
    if not isinstance(e, (CliError, ValueError, FloatingPointError, RuntimeError)):
      text = f"{type(e).__name__}: {text}"
  return " ".join(text.split())


def main(argv: Sequence[str] | None = None) -> int:
  """Runs the command; every error ends as one line on stderr and a non-zero status.

  ``--debug`` re-raises instead, showing the traceback.
  """
  argv = list(sys.argv[1:] if argv is None else argv)
  if argv[:1] == ["--version"]:  # without building the parser (it imports the commands)
    from rsjax import __version__  # the installed version; imports no JAX

    print(f"rsjax {__version__}")
    raise SystemExit(0)  # as argparse's version action
  # A command builds its own parser only: it imports no other command's modules (``rsjax
  # verify`` needs NumPy and SciPy alone, ``rsjax certify`` no training). ``rsjax --help``
  # and a word that is no command build them all.
  first = _command(argv)
  only = first if first in {c.replace("_", "-") for c in COMMANDS} else None
  # Building the parser imports JAX, Flax and SciPy (2-5 s): say so on a terminal.
  loading = (
    first not in JAX_FREE and sys.stderr.isatty() and not {"-h", "--help", "--quiet"} & set(argv)
  )
  if loading:
    print("rsjax: loading JAX ...", end="\r", file=sys.stderr, flush=True)
  parser = build_parser(only)
  if loading:
    print(" " * 24, end="\r", file=sys.stderr, flush=True)
  args = parser.parse_args(argv)
  args.argv = argv  # the exact command, for what records it (rsjax bench --json)

  def show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
  ) -> None:
    del category, filename, lineno, file, line
    print(f"rsjax {args.command}: warning: {' '.join(str(message).split())}", file=sys.stderr)

  try:
    if args.command not in JAX_FREE:
      _setup_jax(args)
    with warnings.catch_warnings(), _sigterm_interrupts():
      if not args.debug:
        warnings.showwarning = show_warning
      return int(args.func(args) or 0)
  except KeyboardInterrupt as e:
    if args.debug:
      raise
    return _interrupted(args.command, e)
  except Exception as e:  # noqa: BLE001 -- one line for the user; --debug shows the traceback
    if args.debug:
      raise
    print(f"rsjax {args.command}: error: {_one_line(e)}", file=sys.stderr)
    return 2
