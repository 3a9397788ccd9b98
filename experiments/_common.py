"""What the experiment scripts share: the results directory, the command line, saving outputs."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # the scripts run from a clone without an install
  sys.path.insert(0, ROOT)
RESULTS = os.path.join(ROOT, "results")


@dataclasses.dataclass(frozen=True)
class BaseTraining:
  """Settings of the Gaussian base models (one per sigma) that a method's script starts from."""
  sigmas: tuple
  model: str
  dataset: str
  epochs: int
  batch_size: int
  lr: float
  lr_step: int

  def model_config(self, input_shape) -> dict:
    """What the training workdirs record of a 10-class model on ``input_shape``."""
    return {"model": self.model, "num_classes": 10, "input_shape": list(input_shape),
            "dataset": self.dataset}


def parser(doc: str) -> argparse.ArgumentParser:
  """A script's command line: its docstring's first line and ``--out`` (default ``RESULTS``)."""
  ap = argparse.ArgumentParser(description=doc.split("\n")[0])
  ap.add_argument("--out", default=RESULTS, help="output directory")
  return ap


def sigmas_config(doc: str, get_config, argv=None):
  """``get_config(--quick)`` with ``--sigmas`` (when given) in place of its sigmas."""
  p = argparse.ArgumentParser(description=doc.split("\n")[0])
  p.add_argument("--quick", action="store_true")
  p.add_argument("--sigmas", type=float, nargs="+", default=None,
                 help="run only these sigma0 (default 0.25 0.5); recorded in the JSON's config")
  args = p.parse_args(argv)
  cfg = get_config(args.quick)
  return dataclasses.replace(cfg, sigmas=tuple(args.sigmas)) if args.sigmas else cfg


def load_splits(dataset: str, skip: int):
  """``(train, test, idx)``: the dataset's two splits and the test indices certified (every
  ``skip``-th)."""
  from rsjax import data, runner
  train, test = data.load(dataset, "train"), data.load(dataset, "test")
  return train, test, runner.select_indices(len(test), skip=skip)


def certify_rows(certify_dataset, *args, **kwargs):
  """``certify_dataset(*args, **kwargs)``, started over when its rows are another run's.

  ``certify_dataset`` is a resumable dataset runner (``rsjax.runner`` or
  ``rsjax.ddrs`` ``certify_dataset``) whose ``run`` record names the model
  (``rsjax.runner.fingerprint``). Rows left by another model or setting raise
  ``rsjax.io.RunMismatchError`` on resume; then every row is certified again
  (``resume=False``), so a rerun never mixes rows of two models.
  """
  from rsjax import io
  try:
    return certify_dataset(*args, **kwargs)
  except io.RunMismatchError as e:
    print(f"{e}: certifying again", flush=True)
    return certify_dataset(*args, **{**kwargs, "resume": False})


def save_results(result: dict, results: str, plot) -> None:
  """Writes ``result`` to ``results.json`` and ``plot(result, results.png)``; says so."""
  os.makedirs(os.path.dirname(results), exist_ok=True)
  with open(results + ".json", "w") as f:
    json.dump(result, f, indent=1, default=str)
  plot(result, results + ".png")
  print(f"wrote {results}.json and .png in {result['seconds']['total']:.0f}s")


def save_figure(fig, path: str, dpi: int) -> None:
  """Lays out ``fig``, writes it to ``path`` and closes it."""
  import matplotlib.pyplot as plt
  fig.tight_layout()
  fig.savefig(path, dpi=dpi)
  plt.close(fig)


def write_json(out_dir: str, name: str, obj) -> str:
  """Writes ``obj`` to ``out_dir/name`` (indented JSON); returns the path."""
  path = os.path.join(out_dir, name)
  with open(path, "w") as f:
    json.dump(obj, f, indent=1)
  return path
