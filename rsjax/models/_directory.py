"""A model directory: ``config.json`` (what rebuilds the model) and its checkpoints.

What ``rsjax train`` and ``rsjax convert`` write and ``rsjax certify MODEL_DIR``
reads::

  config.json       model config (model, num_classes, input_shape, model_kwargs) and
                    what else is worth recording (sigma, dataset, the training config)
  checkpoints/<s>/  orbax checkpoint (``rsjax.models.checkpoint.Checkpoints``) at step s: item
                    "model" (params, rest) and JSON "meta"

``config.json`` holds what is needed to rebuild the model, e.g.::

  {"model": "lenet", "num_classes": 10, "input_shape": [28, 28, 1],
   "model_kwargs": {}, "sigma": 0.25, "train": {"epochs": 90, "lr": 0.1, ...}}

A training adds its own items to the checkpoints (``rsjax.training``), which
loading leaves alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from rsjax.models._bridge import to_train_fn
from rsjax.models._registry import create_model

__all__ = [
  "CONFIG_FILE",
  "CHECKPOINT_DIR",
  "read_config",
  "write_config",
  "load_model",
  "restore_model",
  "save_model",
  "write_checkpointed",
]

#: The file of a model directory that names its model, dataset and training settings.
CONFIG_FILE = "config.json"
#: The folder of a model directory that holds its orbax checkpoints.
CHECKPOINT_DIR = "checkpoints"
_REBUILD = ("model", "num_classes", "input_shape")


def read_config(directory: str | os.PathLike) -> dict:
  """Reads ``config.json`` of a model directory.

  Raises:
    FileNotFoundError: the directory has no ``config.json``.
    ValueError: it is not valid JSON.
  """
  path = os.path.join(os.fspath(directory), CONFIG_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no {CONFIG_FILE} in workdir {os.fspath(directory)!r}")
  with open(path, encoding="utf-8") as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(
        f"{path!r} is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})"
      ) from None


def write_config(directory: str | os.PathLike, config: Mapping) -> None:
  """Writes ``config`` as ``config.json`` of a model directory, atomically."""
  from rsjax.records.io import write_json

  write_json(os.path.join(os.fspath(directory), CONFIG_FILE), dict(config))


def restore_model(
  directory: str | os.PathLike, model: Any, *, step: int | None = None
) -> tuple[Any, dict]:
  """Loads the weights of a model directory into an existing NNX model.

  Args:
    directory: the model directory (e.g. a training workdir).
    model: an NNX model of the same architecture (e.g. freshly constructed);
      updated in place.
    step: the checkpoint step (a training's epoch); None for the latest.

  Returns:
    ``(model, meta)``: the model and the checkpoint metadata (``epoch``,
    ``history``, ...).
  """
  from flax import nnx

  from rsjax.models.checkpoint import Checkpoints

  ckpt_dir = os.path.join(os.fspath(directory), CHECKPOINT_DIR)
  if not os.path.isdir(ckpt_dir):
    raise FileNotFoundError(f"no checkpoints in workdir {os.fspath(directory)!r}")
  _, params, rest = to_train_fn(model)
  with Checkpoints(ckpt_dir, max_to_keep=None) as ckpt:
    items, meta = ckpt.restore(step, targets={"model": {"params": params, "rest": rest}})
  nnx.update(model, items["model"]["params"], items["model"]["rest"])
  return model, meta


def save_model(
  directory: str | os.PathLike,
  model: Any,
  config: Mapping,
  *,
  step: int = 0,
  meta: Mapping | None = None,
) -> None:
  """Writes a model as a model directory that :func:`load_model` (and ``rsjax certify``) reads.

  For models that were not trained by ``rsjax.training.train``, e.g. ones
  converted with :func:`rsjax.models.load_torch`.

  Args:
    directory: the directory (created); must not hold checkpoints yet.
    model: the NNX model.
    config: JSON-serializable dict with ``model``, ``num_classes``,
      ``input_shape`` and optionally ``model_kwargs`` (rebuilds the model with
      ``create_model``), plus anything else worth recording (``sigma``,
      ``dataset``, the source).
    step: the checkpoint step.
    meta: optional JSON metadata of the checkpoint.
  """
  for name in _REBUILD:
    if name not in config:
      raise ValueError(f"config needs {name!r} to rebuild the model; got keys {sorted(config)}")
  write_checkpointed(directory, CONFIG_FILE, model, config, step=step, meta=meta)


def write_checkpointed(
  directory: str | os.PathLike,
  config_file: str,
  model: Any,
  config: Mapping,
  *,
  step: int = 0,
  meta: Mapping | None = None,
) -> None:
  """Writes ``config`` as ``directory/config_file`` and the model's weights as a checkpoint.

  What every model directory shares (a model's, a denoiser's).

  Raises:
    ValueError: ``directory`` already holds checkpoints.
  """
  from rsjax.models.checkpoint import Checkpoints
  from rsjax.records.io import write_json

  directory = os.fspath(directory)
  os.makedirs(directory, exist_ok=True)
  _, params, rest = to_train_fn(model)
  with Checkpoints(os.path.join(directory, CHECKPOINT_DIR), max_to_keep=None) as ckpt:
    if ckpt.latest_step() is not None:
      raise ValueError(f"workdir {directory!r} already holds checkpoints; use a new directory")
    write_json(os.path.join(directory, config_file), dict(config))
    ckpt.save(step, items={"model": {"params": params, "rest": rest}}, meta=meta)


def load_model(
  directory: str | os.PathLike,
  *,
  step: int | None = None,
  rngs: Any = 0,
  create_fn: Callable | None = None,
) -> Any:
  """Rebuilds a model from its model directory.

  The model is constructed from ``config.json`` with
  ``create_fn(config["model"], num_classes=..., input_shape=..., rngs=rngs,
  **config.get("model_kwargs", {}))`` (default :func:`rsjax.models.create_model`),
  then its weights and BatchNorm statistics are restored from the checkpoint.

  Args:
    directory: the model directory (e.g. a training workdir).
    step: the checkpoint step (a training's epoch); None for the latest.
    rngs: seed for the (overwritten) initialization.
    create_fn: model constructor by name; default :func:`rsjax.models.create_model`.

  Returns:
    ``(model, config)``. Use ``rsjax.models.to_apply_fn(model)`` for a pure
    eval-mode ``(apply_fn, variables)``.
  """
  config = read_config(directory)
  for name in _REBUILD:
    if name not in config:
      raise ValueError(
        f"{CONFIG_FILE} in {os.fspath(directory)!r} has no {name!r}; train with "
        "model_config={'model': ..., 'num_classes': ..., 'input_shape': ...} or use restore_model"
      )
  model = (create_fn or create_model)(
    config["model"],
    num_classes=int(config["num_classes"]),
    input_shape=tuple(config["input_shape"]),
    rngs=rngs,
    **config.get("model_kwargs", {}),
  )
  restore_model(directory, model, step=step)
  return model, config
