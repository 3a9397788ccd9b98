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
    return {
      "model": self.model,
      "num_classes": 10,
      "input_shape": list(input_shape),
      "dataset": self.dataset,
    }


def lenet_mnist5k(quick: bool) -> dict:
  """The :class:`BaseTraining` fields of the Gaussian LeNets on mnist5k (sigma 0.25 and 0.5)
  that the MNIST method scripts start from."""
  return dict(
    sigmas=(0.25, 0.5),
    model="lenet",
    dataset="mnist5k",
    epochs=6 if quick else 20,
    batch_size=128,
    lr=0.05,
    lr_step=3 if quick else 8,
  )


@dataclasses.dataclass(frozen=True)
class Certification:
  """How a script certifies its rows, and where it keeps its runs and its results."""

  skip: int  # every skip-th test input
  n0: int
  n: int
  alpha: float
  seed: int
  out: str  # the runs (models, rows)
  results: str  # results/NAME, without .json / .png


def certified_curve(correct, radius, radii, *, predict=None) -> dict:
  """``{"r": certified accuracy at r}`` over ``radii`` (``rsjax.metrics.certified_accuracy``)."""
  import numpy as np

  from rsjax import metrics

  acc = metrics.certified_accuracy(correct, radius, np.asarray(radii), predict=predict)
  return {f"{r:g}": float(a) for r, a in zip(radii, acc, strict=True)}


def parser(doc: str) -> argparse.ArgumentParser:
  """A script's command line: its docstring's first line and ``--out`` (default ``RESULTS``)."""
  ap = argparse.ArgumentParser(description=doc.split("\n")[0])
  ap.add_argument("--out", default=RESULTS, help="output directory")
  return ap


def sigmas_config(doc: str, get_config, argv=None, flags: dict | None = None):
  """``get_config(--quick)`` with ``--sigmas`` (when given) in place of its sigmas; each of
  ``flags`` (``{"name": help}``) is a switch ``--name`` passed on as ``get_config(...,
  name=True)`` when given (its ``-`` read as ``_``)."""
  p = argparse.ArgumentParser(description=doc.split("\n")[0])
  p.add_argument("--quick", action="store_true")
  for name, text in (flags or {}).items():
    p.add_argument("--" + name, action="store_true", help=text)
  p.add_argument(
    "--sigmas",
    type=float,
    nargs="+",
    default=None,
    help="run only these sigma0 (default 0.25 0.5); recorded in the JSON's config",
  )
  args = p.parse_args(argv)
  on = {k: True for k in (n.replace("-", "_") for n in flags or {}) if getattr(args, k)}
  cfg = get_config(args.quick, **on)
  return dataclasses.replace(cfg, sigmas=tuple(args.sigmas)) if args.sigmas else cfg


def load_splits(dataset: str, skip: int):
  """``(train, test, idx)``: the dataset's two splits and the test indices certified (every
  ``skip``-th)."""
  import numpy as np

  from rsjax import data
  from rsjax.records import spec as runspec

  train, test = data.load(dataset, "train"), data.load(dataset, "test")
  return train, test, np.asarray(runspec.declared_indices(len(test), skip=skip))


def load_arrays(dataset: str, skip: int):
  """``((x, y), (xt, yt), idx, input_shape)``: the training and test arrays of the dataset, the
  test indices certified (every ``skip``-th) and the shape of one input."""
  train, test, idx = load_splits(dataset, skip)
  return train.arrays(), test.arrays(), idx, tuple(train.input_shape)


def repo_path(path: str) -> str:
  """``path`` relative to the repository when inside it (what result files record, so that
  they name no machine's directories), else as it is."""
  inside = os.path.abspath(path).startswith(ROOT + os.sep)
  return os.path.relpath(path, ROOT) if inside else path


def certify_run(
  out: str,
  model,
  workdir: str,
  dataset,
  *,
  sigma: float,
  skip: int,
  n0: int,
  n: int,
  alpha: float,
  seed: int,
  method: str = "cohen",
  options: dict | None = None,
  batch_size: int = 1000,
  inputs_per_call: int | None = None,
  save_counts: bool = False,
  progress: bool = False,
):
  """Certifies every ``skip``-th input of ``dataset`` with ``model`` into ``out``, a run that
  ``rsjax verify`` accepts; returns the ``rsjax.app.launch.Report``.

  The run (``rsjax.records.spec.RunSpec``) names the model by its fingerprint and its model
  directory ``workdir`` (where ``rsjax.training`` saved it; recorded relative to the
  repository when inside it), ``method`` (``rsjax.methods``) with ``options`` (the others at
  their defaults), the sampling settings and the key (``seed`` folded with 1, then the
  claim): ``rsjax.app.launch.prepare``, and ``rsjax.app.launch.run`` certifies it, resuming
  rows already in ``out``. Rows of another run (another model, setting, or an older rsjax's
  record) are certified again (``Execution(on_mismatch="restart")``), so a rerun never mixes
  rows of two runs.
  """
  import rsjax
  from rsjax import models
  from rsjax.app import launch

  apply_fn, params = models.to_apply_fn(model)
  config = models.read_config(workdir)
  spec, loaded = launch.prepare(
    launch.Loaded(model, config, dataset, apply_fn, params, workdir),
    sampling=rsjax.Sampling(n0=n0, n=n, alpha=alpha),
    out=out,
    sigma=sigma,
    method=method,
    options=options,
    rows=launch.DataRange(skip=skip),
    seed=seed,
    path=repo_path(workdir),
    key_fold_in=(1,),
  )
  execution = launch.Execution(
    batch_size=batch_size, inputs_per_call=inputs_per_call, progress=progress, on_mismatch="restart"
  )
  return launch.run(spec, loaded, execution=execution, save_counts=save_counts)


def run_script(doc: str, get_config, run, plot, argv=None) -> int:
  """A sigma script's ``main``: its config (:func:`sigmas_config`), ``run`` logging each
  line at once, then :func:`save_results`."""
  cfg = sigmas_config(doc, get_config, argv)
  result = run(cfg, log=lambda m: print(m, flush=True))
  save_results(result, cfg.results, plot)
  return 0


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


def strip_checkpoint_paths(directory: str) -> int:
  """Rewrites the ``commit_success.txt`` files that Orbax leaves in every checkpoint under
  ``directory`` without the absolute path it writes there, so that checkpoints committed to
  the repository name no machine's directories (Orbax's restore only checks that the file
  exists). Returns the number of files rewritten."""
  changed = 0
  for parent, _, files in os.walk(directory):
    if "commit_success.txt" in files:
      path = os.path.join(parent, "commit_success.txt")
      with open(path) as fh:
        text = fh.read()
      if "/" in text:
        with open(path, "w") as fh:
          fh.write("Checkpoint commit was successful")
        changed += 1
  return changed
