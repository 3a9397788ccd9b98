"""What ``rsjax bench`` times, loaded: a model directory, a PyTorch checkpoint or a zoo
architecture with random weights (``rsjax.models.create_model``), optionally folded
(``--fold-bn``), packed (``--pack``), resized and behind a denoiser, as the pure
``apply_fn(params, x)`` that ``rsjax.certify`` takes. Loading goes through ``rsjax.app.launch``
(the same loaders, the same one-line errors as ``rsjax certify``)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

from rsjax.app.launch import loading
from rsjax.app.launch.errors import RunError

__all__ = ["ARCH_DEFAULTS", "Source", "Target", "load_target", "parse_shape", "shape_text"]

#: ``(input_shape, num_classes)`` a zoo architecture is benchmarked at unless told otherwise:
#: the datasets it is made for (MNIST, CIFAR-10, ImageNet).
ARCH_DEFAULTS: dict[str, tuple[tuple[int, ...], int]] = {
  **dict.fromkeys(("mlp", "cnn", "lenet"), ((28, 28, 1), 10)),
  **dict.fromkeys(
    ("resnet20", "resnet110", "cifar_resnet20", "cifar_resnet110"), ((32, 32, 3), 10)
  ),
  **dict.fromkeys(("resnet18", "resnet50"), ((224, 224, 3), 1000)),
}


@dataclasses.dataclass(frozen=True)
class Source:
  """Where the model comes from and how it is run (the command's flags)."""

  model: str | None = None  # a model directory, or a zoo architecture's name
  arch: str | None = None
  torch_checkpoint: str | None = None
  torch_module: str | None = None
  torch_arch: str | None = None
  normalize: str | None = None
  input_shape: tuple[int, ...] | None = None
  num_classes: int | None = None
  denoiser: str | None = None
  resize: str | None = None
  sigma: float | None = None
  pack: int = 1
  fold_bn: bool = False
  seed: int = 0


@dataclasses.dataclass(frozen=True)
class Target:
  """A loaded model, ready to certify: ``apply_fn(params, x)`` on ``[b, *input_shape]``."""

  name: str
  kind: str  # "architecture (random weights)", "model directory", "PyTorch checkpoint"
  apply_fn: Callable[..., Any]
  params: Any
  input_shape: tuple[int, ...]
  num_classes: int
  sigma: float
  pack: int = 1
  folded: int = 0  # conv + BatchNorm pairs folded (0: --fold-bn off or nothing to fold)
  denoiser: str | None = None
  notes: tuple[str, ...] = ()
  # The NNX model as loaded (before --fold-bn and --pack): the network a PyTorch twin
  # computes (a PyTorch module's: the module itself); None behind a denoiser or a resize
  # (a pipeline has no twin).
  model: Any = dataclasses.field(default=None, compare=False, repr=False)

  def describe(self) -> dict[str, Any]:
    """The target's facts for the JSON (no arrays)."""
    return {
      "name": self.name,
      "kind": self.kind,
      "input_shape": list(self.input_shape),
      "num_classes": self.num_classes,
      "sigma": self.sigma,
      "pack": self.pack,
      "fold_bn_pairs": self.folded,
      "denoiser": self.denoiser,
      "notes": list(self.notes),
    }


def parse_shape(text: str) -> tuple[int, ...]:
  """``"28,28,1"`` or ``"32x32x3"`` -> ``(28, 28, 1)``."""
  parts = str(text).lower().replace("x", ",").split(",")
  try:
    shape = tuple(int(p) for p in parts if p.strip())
  except ValueError:
    shape = ()
  if not shape or min(shape) < 1:
    raise RunError(f"--input-shape must be sizes like 28,28,1 or 32x32x3, got {text!r}")
  return shape


def _zoo(name: str, src: Source) -> tuple[Any, dict[str, Any]]:
  """A zoo architecture with random weights (seeded) at its default or the given shape."""
  from rsjax import models

  shape, classes = ARCH_DEFAULTS.get(name, (None, None))
  shape = src.input_shape or shape
  classes = src.num_classes or classes
  if shape is None or classes is None:
    raise RunError(
      f"--arch {name}: give --input-shape and --num-classes (no default for this architecture)"
    )
  try:
    model = models.create_model(name, num_classes=classes, input_shape=shape, rngs=src.seed)
  except (TypeError, ValueError) as e:
    raise RunError(f"--arch {name}: {e}") from None
  return model, {"model": name, "input_shape": list(shape), "num_classes": classes}


def _open(src: Source) -> tuple[str, str, Any, dict[str, Any]]:
  """``(name, kind, model, config)`` of the one source the flags name (a PyTorch module's
  ``config["twin"]``: the module itself, its twin)."""
  from rsjax import models

  given = [s for s in (src.model, src.arch, src.torch_checkpoint) if s is not None]
  if src.torch_module is not None:
    if src.model is not None or src.arch is not None:
      raise RunError("give one model: --torch-module SPEC, MODEL or --arch NAME")
    model, config, module = loading.open_torch_module(
      src.torch_module, src.torch_checkpoint, src.normalize, src.input_shape
    )
    label = os.path.basename(src.torch_module)
    return label, "PyTorch module (torch.export)", model, {**config, "twin": module}
  if len(given) != 1:
    raise RunError(
      "give one model: MODEL (a directory or an architecture), --torch-checkpoint F.pth, "
      "--torch-module SPEC or --arch NAME"
    )
  if src.torch_checkpoint is not None:
    model, config = loading.open_torch_checkpoint(
      src.torch_checkpoint, src.torch_arch, src.normalize, src.input_shape
    )
    return os.path.basename(src.torch_checkpoint), "PyTorch checkpoint", model, config
  if src.normalize is not None or src.torch_arch is not None:
    raise RunError("--normalize and --torch-arch work with --torch-checkpoint")
  name = src.arch or src.model
  assert name is not None
  if src.arch is None and os.path.isdir(name):
    model, config = loading.open_model_dir(name)
    return name, "model directory", model, config
  if name not in models.MODELS and name not in ARCH_DEFAULTS:
    if src.arch is None and (os.sep in name or os.path.exists(name)):
      loading.open_model_dir(name)  # its own one-line error
    raise RunError(
      f"unknown model {name!r}: no such model directory, and no architecture of rsjax.models "
      f"({', '.join(sorted(models.MODELS))}); give a directory of 'rsjax train' or "
      "'rsjax convert', --torch-checkpoint F.pth or --arch NAME"
    )
  model, config = _zoo(name, src)
  return name, "architecture (random weights)", model, config


def _transformed(model: Any, src: Source) -> tuple[Any, int, int, list[str]]:
  """``(model, pack, folded, notes)``: batch norm folded and the narrow stage packed where
  the model allows, a note where it does not (the model then runs as it is)."""
  from rsjax import models

  notes: list[str] = []
  folded = 0
  if src.fold_bn:
    model, folded = models.fold_batch_norm(model)
    if not folded:
      notes.append("--fold-bn: the model has no conv + BatchNorm pair; it runs as it is")
  pack = int(src.pack)
  try:
    model = models.pack_narrow_stage(model, pack)
  except ValueError as e:
    notes.append(f"--pack {pack}: {e}; it runs unpacked")
    pack = 1
  return model, pack, folded, notes


def _sigma(src: Source, config: dict[str, Any]) -> float:
  if src.sigma is not None:
    return float(src.sigma)
  trained = config.get("sigma")
  return float(trained) if isinstance(trained, (int, float)) and trained > 0 else 0.25


def _input_shape(src: Source, config: dict[str, Any]) -> tuple[int, ...]:
  if src.resize is not None:  # the pipeline's input is the denoiser's, before the resize
    if src.input_shape is None:
      raise RunError("--resize needs --input-shape (the noisy input's shape, before the resize)")
    return src.input_shape
  return tuple(int(d) for d in (src.input_shape or config["input_shape"]))


def load_target(src: Source) -> Target:
  """The model the flags name, loaded, transformed and composed; a failure the user can fix
  is a :class:`RunError` in one line."""
  from rsjax import models
  from rsjax.app.launch.spec import parse_size

  name, kind, loaded, config = _open(src)
  model, pack, folded, notes = _transformed(loaded, src)
  apply_fn: Callable[..., Any]
  apply_fn, params = models.to_apply_fn(model)
  sigma = _sigma(src, config)
  if src.resize is not None:
    from rsjax.models.denoise.compose import Resized

    apply_fn = Resized(apply_fn, parse_size(src.resize))
  if src.denoiser is not None:
    apply_fn, params, _ = loading.open_denoised(src.denoiser, apply_fn, params, sigma=sigma)
  return Target(
    name=name,
    kind=kind,
    apply_fn=apply_fn,
    params=params,
    input_shape=_input_shape(src, config),
    num_classes=int(config["num_classes"]),
    sigma=sigma,
    pack=pack,
    folded=folded,
    denoiser=src.denoiser,
    notes=tuple(notes),
    model=config.get("twin", loaded) if src.denoiser is None and src.resize is None else None,
  )


def shape_text(shape: Sequence[int]) -> str:
  """``(28, 28, 1)`` -> ``"28x28x1"``."""
  return "x".join(str(d) for d in shape)
