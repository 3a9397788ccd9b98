"""Opening what a run names: its dataset, its model (a model directory or a PyTorch
checkpoint) and its denoiser through ``rsjax.data`` and ``rsjax.models`` (which load
them), each failure a :class:`RunError` naming the argument at fault."""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Callable
from typing import Any

from rsjax.app.launch.errors import MismatchError, RunError

__all__ = [
  "open_dataset",
  "open_model_dir",
  "open_torch_checkpoint",
  "open_torch_module",
  "open_denoised",
  "warn_if_unfinished",
]


def open_dataset(name: str, split: str, data_dir: str | None) -> Any:
  """The split of a dataset (``rsjax.data.load``)."""
  from rsjax import data

  try:
    return data.load(name, split, data_dir=data_dir)
  except (data.DatasetNotFoundError, ValueError) as e:
    raise RunError(str(e), "dataset") from None


def open_model_dir(model_dir: str) -> tuple[Any, dict]:
  """``(model, config)`` of a directory of 'rsjax train' or 'rsjax convert'
  (``rsjax.models.load_model``)."""
  from rsjax import models

  if not os.path.isdir(model_dir):
    raise RunError(
      f"model directory {model_dir!r} does not exist; train one with "
      "'rsjax train --dataset mnist5k --model lenet --sigma 0.25 --out DIR'",
      "model",
    )
  try:
    return models.load_model(model_dir)
  except (FileNotFoundError, ValueError) as e:
    if "tree structures do not match" not in str(e):
      raise RunError(f"no usable trained model in {model_dir!r}: {e}", "model") from None
  # orbax reports another architecture as a long tree dump: say which one it holds.
  config = models.read_config(model_dir)
  named = config.get("model")
  held = _architecture_held(model_dir, config)
  holds = f"holds a {held!r} model" if held else "holds another architecture"
  raise RunError(
    f"the checkpoint in {model_dir!r} {holds}, but its config.json says {named!r} "
    f"(num_classes {config.get('num_classes')}, input_shape "
    f"{config.get('input_shape')}); retrain or fix config.json",
    "model",
  )


def warn_if_unfinished(model_dir: str, config: dict) -> None:
  """Warns when the model's training stopped before its last epoch."""
  from rsjax import models
  from rsjax.models.checkpoint import Checkpoints

  epochs = (config.get("train") or {}).get("epochs")
  if not isinstance(epochs, int):
    return  # not trained by 'rsjax train' (converted)
  with Checkpoints(os.path.join(model_dir, models.CHECKPOINT_DIR), max_to_keep=None) as ckpt:
    done = ckpt.latest_step()
  if done is not None and done < epochs:
    warnings.warn(
      f"the model in {model_dir} finished {done} of its {epochs} training epochs "
      "(run the same 'rsjax train' command again to finish it)",
      stacklevel=2,
    )


def _architecture_held(model_dir: str, config: dict) -> str | None:
  """The zoo architecture whose weights the checkpoint holds, if any."""
  from rsjax import models

  for name in models.MODELS:
    if name == config.get("model"):
      continue
    try:
      model = models.create_model(
        name,
        num_classes=int(config["num_classes"]),
        input_shape=tuple(config["input_shape"]),
        rngs=0,
      )
      models.restore_model(model_dir, model)
    except Exception:  # noqa: BLE001 -- not this one
      continue
    return name
  return None


def open_torch_checkpoint(
  path: str, arch: str | None, normalize: str | None, input_shape: tuple[int, ...] | None = None
) -> tuple[Any, dict]:
  """The model of a PyTorch checkpoint; prints the normalization it uses."""
  from rsjax import models

  try:
    norm = "auto" if normalize is None else models.parse_normalize(normalize)
    model, config = models.load_torch(path, arch, normalize=norm, input_shape=input_shape)
  except models.UnknownNormalizationError as e:
    how = "pass normalize=none, a dataset name (mnist, cifar10, imagenet2012, ...) or MEAN/STD"
    why = models.UnknownNormalizationError(e.arch, how=how + " (e.g. 0.1307/0.3081)")
    raise RunError(str(why), "normalize") from None
  except (FileNotFoundError, ImportError, ValueError) as e:
    raise RunError(str(e), "model") from None
  print(
    f"{os.path.basename(path)}: {config['torch_arch']}, input normalization "
    f"{config['normalization']}"
  )
  return model, config


def open_torch_module(
  spec: str, checkpoint: str | None, normalize: str | None, input_shape: tuple[int, ...] | None
) -> tuple[Any, dict, Any]:
  """``(model, config, module)`` of any PyTorch module (``FILE.pt`` or ``FILE.py:CLASS`` with
  ``checkpoint``, ``rsjax.models.load_module``) through ``torch.export``
  (``rsjax.models.load_torch_module``), exported at ``input_shape`` (rsjax's: ``(H, W, C)``,
  the module takes ``[b, C, H, W]``); prints the graph's digest and the normalization."""
  import numpy as np

  from rsjax import models

  if input_shape is None:
    raise RunError(
      f"{spec}: the input shape is needed to export it (--input-shape H,W,C; certify: the "
      "dataset's)",
      "model",
    )
  shape = tuple(int(d) for d in input_shape)
  torch_shape = (shape[-1], *shape[:-1]) if len(shape) == 3 else shape
  example = np.random.default_rng(0).uniform(size=(2, *torch_shape)).astype(np.float32)
  try:
    norm = None if normalize is None else models.parse_normalize(normalize)
    module = models.load_module(spec, checkpoint)
    model, config = models.load_torch_module(module, example, normalize=norm)
  except (FileNotFoundError, ImportError, ValueError) as e:
    raise RunError(f"{spec}: {e}", "model") from None
  nodes = len(config["model_kwargs"]["graph"]["nodes"])
  print(
    f"{os.path.basename(spec)}: {config['torch_arch']} through torch.export ({nodes} nodes, "
    f"graph {config['graph_digest'][:12]}), input normalization {config['normalization']}"
  )
  return model, config, module


def open_denoised(
  path: str, apply_fn: Callable, params: Any, *, sigma: float
) -> tuple[Callable, Any, str]:
  """Denoised smoothing: ``(apply_fn, params, digest)`` of classifier(denoiser(x + delta)),
  the denoiser read from ``path`` ('rsjax train-denoiser', a diffusers UNet2DModel or an
  OpenAI checkpoint); ``digest``: its settings' (``workdir.denoiser_digest``).

  Raises:
    RunError: no denoiser at ``path``.
    MismatchError: a denoiser that cannot denoise at ``sigma`` (or whose settings are not
      usable): the run does not fit it.
  """
  from rsjax.models.denoise import compose, workdir

  try:
    d_fn, d_params, config = workdir.denoiser_fn(path, sigma=sigma)
  except FileNotFoundError as e:
    raise RunError(f"denoiser: {e}", "denoiser") from None
  except ValueError as e:
    raise MismatchError(f"denoiser: {e}", "denoiser") from None
  return compose.Denoised(d_fn, apply_fn), (d_params, params), config["digest"]


def file_sha256(name: str) -> str | None:
  """The SHA-256 of a dataset given as an array file (``*.npz``: its path), else None (a
  registry dataset, which any verifier loads by name)."""
  from rsjax import data

  if not data.is_array_file(name):
    return None
  h = hashlib.sha256()
  with open(name, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def bind_images(ref: Any, ds: Any) -> Any:
  """``ref`` (a ``DataRef``) with the images' SHA-256 of a dataset read from a folder
  (``rsjax.data.images_sha256`` of its declared indices: each file is read once more, a few
  seconds per GB); ``ref`` itself for a dataset of TFDS, a package or an array file."""
  import dataclasses

  from rsjax import data

  digest = data.images_sha256(ds, ref.indices())
  if digest is None:
    return ref
  return dataclasses.replace(ref, images_sha256=digest)


def check_classes(num_classes: int | None, ds: Any, where: str) -> None:
  """Refuses a classifier whose number of classes is not the dataset's, before any input is
  read (a folder of another dataset, a checkpoint of another).

  Raises:
    MismatchError: naming both counts and, for a folder dataset, the folder.
  """
  if num_classes is None or int(num_classes) == ds.num_classes:
    return
  folder = f" (the folder {ds.root})" if hasattr(ds, "root") else ""
  raise MismatchError(
    f"{where} classifies {int(num_classes)} classes, {ds.name} {ds.split}{folder} has "
    f"{ds.num_classes}: not the dataset of this model",
    "dataset",
  )


def folder_check(run: Any, ds: Any) -> tuple[bool, str]:
  """``(ok, words)``: whether the folder ``ds`` holds the images the run ``run`` read from a
  folder (their SHA-256, ``rsjax.data.images_sha256``), and which they are, or why not."""
  from rsjax.verify._run import check_images, images_words

  issues = check_images(run, ds)
  return not issues, issues[0].reason if issues else (images_words(run, ds) or "")
