"""What the experiment scripts share: the results directory, the command line, saving outputs."""

from __future__ import annotations

import argparse
import json
import os

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")


def parser(doc: str) -> argparse.ArgumentParser:
  """A script's command line: its docstring's first line and ``--out`` (default ``RESULTS``)."""
  ap = argparse.ArgumentParser(description=doc.split("\n")[0])
  ap.add_argument("--out", default=RESULTS, help="output directory")
  return ap


def save_figure(fig, out_dir: str, name: str, dpi: int) -> None:
  """Lays out ``fig``, writes it to ``out_dir/name`` and closes it."""
  import matplotlib.pyplot as plt
  fig.tight_layout()
  fig.savefig(os.path.join(out_dir, name), dpi=dpi)
  plt.close(fig)


def write_json(out_dir: str, name: str, obj) -> str:
  """Writes ``obj`` to ``out_dir/name`` (indented JSON); returns the path."""
  path = os.path.join(out_dir, name)
  with open(path, "w") as f:
    json.dump(obj, f, indent=1)
  return path
