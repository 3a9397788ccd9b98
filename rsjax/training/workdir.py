"""The training work directory: config, history, checkpoints, and loading a model back.

Layout of a workdir::

  config.json       model config (name, num_classes, input_shape, ...) + sigma + training config
  history.json      per-epoch metrics (also stored in each checkpoint)
  checkpoints/<e>/  orbax checkpoint after epoch e: items "model" (params, rest),
                    "train" (optimizer state, key) and JSON "meta"

``config.json`` holds what is needed to rebuild the model, e.g.::

  {"model": "lenet", "num_classes": 10, "input_shape": [28, 28, 1],
   "model_kwargs": {}, "sigma": 0.25, "train": {"epochs": 90, "lr": 0.1, ...}}
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from rsjax.checkpoint import Checkpoints

__all__ = ["CONFIG_FILE", "HISTORY_FILE", "CHECKPOINT_DIR", "read_config", "load_model",
           "restore_model", "save_model", "write_checkpointed", "write_json"]

CONFIG_FILE = "config.json"
HISTORY_FILE = "history.json"
CHECKPOINT_DIR = "checkpoints"


def write_json(path, obj) -> None:
  """Writes JSON atomically (temporary file, fsync, rename)."""
  from rsjax.io import atomic_write_text
  atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_config(workdir) -> dict:
  """Reads ``config.json`` of a training workdir."""
  path = os.path.join(os.fspath(workdir), CONFIG_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no {CONFIG_FILE} in workdir {os.fspath(workdir)!r}")
  with open(path, encoding="utf-8") as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f"{path!r} is not valid JSON ({e.msg} at line {e.lineno}, column "
                       f"{e.colno})") from None


def restore_model(workdir, model, *, step: int | None = None):
  """Loads trained weights from a workdir into an existing NNX model.

  Args:
    workdir: the training workdir.
    model: an NNX model of the same architecture (e.g. freshly constructed);
      updated in place.
    step: the epoch to load; None for the latest checkpoint.

  Returns:
    ``(model, meta)``: the model and the checkpoint metadata (``epoch``,
    ``history``, ...).
  """
  from flax import nnx

  from rsjax.models import to_train_fn

  ckpt_dir = os.path.join(os.fspath(workdir), CHECKPOINT_DIR)
  if not os.path.isdir(ckpt_dir):
    raise FileNotFoundError(f"no checkpoints in workdir {os.fspath(workdir)!r}")
  _, params, rest = to_train_fn(model)
  with Checkpoints(ckpt_dir, max_to_keep=None) as ckpt:
    items, meta = ckpt.restore(step, targets={"model": {"params": params, "rest": rest}})
  nnx.update(model, items["model"]["params"], items["model"]["rest"])
  return model, meta


def save_model(workdir, model, config, *, step: int = 0, meta=None) -> None:
  """Writes a model as a workdir that ``load_model`` (and ``rsjax certify WORKDIR``) reads.

  For models that were not trained by :func:`rsjax.training.train`, e.g. ones
  converted with ``rsjax.models.load_torch``.

  Args:
    workdir: the directory (created); must not hold checkpoints yet.
    model: the NNX model.
    config: JSON-serializable dict with ``model``, ``num_classes``,
      ``input_shape`` and optionally ``model_kwargs`` (rebuilds the model with
      ``create_model``), plus anything else worth recording (``sigma``,
      ``dataset``, the source).
    step: the checkpoint step.
    meta: optional JSON metadata of the checkpoint.
  """
  workdir = os.fspath(workdir)
  for name in ("model", "num_classes", "input_shape"):
    if name not in config:
      raise ValueError(f"config needs {name!r} to rebuild the model; got keys {sorted(config)}")
  write_checkpointed(workdir, CONFIG_FILE, model, config, step=step, meta=meta)


def write_checkpointed(directory, config_file: str, model, config, *, step: int = 0,
                       meta=None) -> None:
  """Writes ``config`` as ``directory/config_file`` and the model's weights as a checkpoint.

  What every model directory shares (a workdir, a denoiser's directory).

  Raises:
    ValueError: ``directory`` already holds checkpoints.
  """
  from rsjax.models import to_train_fn

  directory = os.fspath(directory)
  os.makedirs(directory, exist_ok=True)
  _, params, rest = to_train_fn(model)
  with Checkpoints(os.path.join(directory, CHECKPOINT_DIR), max_to_keep=None) as ckpt:
    if ckpt.latest_step() is not None:
      raise ValueError(f"workdir {directory!r} already holds checkpoints; use a new directory")
    write_json(os.path.join(directory, config_file), dict(config))
    ckpt.save(step, items={"model": {"params": params, "rest": rest}}, meta=meta)


def load_model(workdir, *, step: int | None = None, rngs=0,
               create_fn: Callable | None = None):
  """Rebuilds a trained model from its workdir.

  The model is constructed from ``config.json`` with
  ``create_fn(config["model"], num_classes=..., input_shape=..., rngs=rngs,
  **config.get("model_kwargs", {}))`` (default ``rsjax.models.create_model``),
  then its weights and BatchNorm statistics are restored from the checkpoint.

  Args:
    workdir: the training workdir.
    step: the epoch to load; None for the latest checkpoint.
    rngs: seed for the (overwritten) initialization.
    create_fn: model constructor by name; default ``rsjax.models.create_model``.

  Returns:
    ``(model, config)``. Use ``rsjax.models.to_apply_fn(model)`` for a pure
    eval-mode ``(apply_fn, variables)``.
  """
  config = read_config(workdir)
  for name in ("model", "num_classes", "input_shape"):
    if name not in config:
      raise ValueError(
          f"{CONFIG_FILE} in {os.fspath(workdir)!r} has no {name!r}; train with "
          "model_config={'model': ..., 'num_classes': ..., 'input_shape': ...} or use restore_model")
  if create_fn is None:
    from rsjax.models import create_model as create_fn
  model = create_fn(config["model"], num_classes=int(config["num_classes"]),
                    input_shape=tuple(config["input_shape"]), rngs=rngs,
                    **config.get("model_kwargs", {}))
  restore_model(workdir, model, step=step)
  return model, config
