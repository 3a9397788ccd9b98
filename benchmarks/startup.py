"""Start-up of the ``rsjax`` command: wall seconds of commands that need no device, each a
fresh process, over several alternated rounds (min, median, max), and whether each imported
JAX (``sys.modules`` after the command).

    python -m benchmarks.run --config benchmarks/configs/startup.py
"""

from __future__ import annotations

import json as json_lib
import os
import statistics
import subprocess
import sys
import time

__all__ = ["COMMANDS", "startup"]

#: The commands timed (``rsjax`` arguments); ``RUN`` is replaced by a committed result file.
COMMANDS = (
  ("--version",),
  ("--help",),
  ("train", "--help"),
  ("certify", "--help"),
  ("verify", "--help"),
  ("verify", "RUN"),
  ("analyze", "RUN"),
)
_RUN = os.path.join(os.path.dirname(__file__), "..", "results", "acr_study_quick", "gaussian.tsv")
_PROBE = (
  "import sys, runpy; sys.argv = ['rsjax'] + sys.argv[1:]\n"
  "try:\n  runpy.run_module('rsjax', run_name='__main__')\nexcept SystemExit:\n  pass\n"
  "print('JAX' if 'jax' in sys.modules else 'NOJAX', file=sys.stderr)\n"
)


def _once(argv: list[str]) -> tuple[float, bool]:
  t = time.perf_counter()
  out = subprocess.run(
    [sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=600
  )
  seconds = time.perf_counter() - t
  return seconds, out.stderr.strip().splitlines()[-1:] == ["JAX"]


def startup(*, rounds: int = 5, json: str | None = None) -> dict:
  """Wall seconds of each of :data:`COMMANDS` (``rounds`` rounds, the commands alternated
  within a round), and whether it imported JAX; written to ``json``."""
  argvs = [[os.path.abspath(_RUN) if a == "RUN" else a for a in c] for c in COMMANDS]
  seconds: dict[str, list[float]] = {" ".join(c): [] for c in COMMANDS}
  jax_seen = {}
  for _ in range(rounds):
    for command, argv in zip(COMMANDS, argvs, strict=True):
      s, imported = _once(argv)
      seconds[" ".join(command)].append(s)
      jax_seen[" ".join(command)] = imported
  doc = {
    "load_average": os.getloadavg(),
    "commands": {
      name: {
        "min": min(v),
        "median": statistics.median(v),
        "max": max(v),
        "imports_jax": jax_seen[name],
      }
      for name, v in seconds.items()
    },
  }
  for name, row in doc["commands"].items():
    print(f"rsjax {name:<20} {row['min']:.2f} / {row['median']:.2f} / {row['max']:.2f} s"
          f"{'  (imports JAX)' if row['imports_jax'] else ''}")  # fmt: skip
  if json:
    os.makedirs(os.path.dirname(os.path.abspath(json)), exist_ok=True)
    with open(json, "w") as f:
      json_lib.dump(doc, f, indent=1)
  return doc
