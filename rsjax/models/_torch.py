"""Import PyTorch checkpoints of the randomized smoothing literature into rsjax models.

Most published smoothed classifiers (Cohen et al., Salman et al., MACER,
Consistency, ...) are PyTorch checkpoints ``{'arch': ..., 'state_dict': ...}``
of ``Sequential(NormalizeLayer, model)``, the ImageNet ones wrapped in
``DataParallel`` (keys ``1.module.conv1.weight``). This module reads such a
checkpoint (or a plain ``state_dict``), builds the matching rsjax NNX model and
fills it with the weights and BatchNorm running statistics:

- ``cifar_resnet20``, ``cifar_resnet110`` (any depth ``6 n + 2``): Cohen et
  al.'s ``archs/cifar_resnet.py`` (bearpaw's CIFAR ResNet) -> ``CifarResNet``;
- ``resnet18``, ``resnet34``, ``resnet50``, ``resnet101``, ``resnet152``:
  torchvision's ResNets -> ``ImageNetResNet``;
- ``lenet``: the MNIST LeNet of Consistency / MACER (conv 20, conv 50, fc 500)
  -> ``LeNet(channels=(20, 50), hidden_sizes=(500,), padding=0)``.

Layouts are converted here, once: convolution kernels OIHW -> HWIO, linear
weights ``[out, in]`` -> ``[in, out]`` (and the NCHW flatten order of LeNet's
first linear layer -> NHWC), BatchNorm ``weight/bias/running_mean/running_var``
-> ``scale/bias/mean/var``. The rsjax models use PyTorch's explicit symmetric
padding, so strides and padding agree with torchvision's.

The state-dict keys, the recognition of the architecture and the layout
conversions are in ``rsjax.models._torch_keys``; this module reads the file,
checks the keys and shapes, fills the model and settles its normalization.

PyTorch is needed only to read a checkpoint file (``pip install 'rsjax[torch]'``);
a state dict of NumPy arrays needs no PyTorch.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from flax import nnx

from rsjax.models import _torch_keys as torch_keys
from rsjax.models._bridge import EvalApply, to_apply_fn
from rsjax.models._layers import NORMALIZATION, Normalize, NormalizeArg, resolve_normalization
from rsjax.models._registry import create_model
from rsjax.models._torch_keys import TORCH_ARCHITECTURES

__all__ = [
  "TORCH_ARCHITECTURES",
  "UnknownNormalizationError",
  "describe_normalization",
  "from_torch",
  "load_torch",
  "parse_normalize",
]

# Normalization of Cohen et al.'s ``get_architecture(arch, dataset)``: CIFAR-10
# for the CIFAR ResNets, ImageNet for torchvision's, none for MNIST (Consistency).
_DEFAULT_NORMALIZE = {"cifar": "cifar10", "imagenet": "imagenet2012", "lenet": None}


def _to_numpy(value) -> np.ndarray:
  if hasattr(value, "detach"):  # a torch.Tensor
    value = value.detach().cpu()
    if value.is_floating_point():
      value = value.float()
    value = value.numpy()
  return np.asarray(value)


def _read(path_or_state_dict) -> tuple[dict[str, np.ndarray], str | None]:
  """``(state dict of NumPy arrays, the checkpoint's 'arch' or None)``."""
  obj = path_or_state_dict
  if isinstance(obj, (str, os.PathLike)):
    path = os.fspath(obj)
    if not os.path.isfile(path):
      raise FileNotFoundError(f"PyTorch checkpoint {path!r} does not exist")
    if os.path.getsize(path) == 0:
      raise ValueError(f"PyTorch checkpoint {path!r} is empty (0 bytes): a cut download or copy?")
    try:
      import torch
    except ImportError:
      raise ImportError(
        f"reading the PyTorch checkpoint {path!r} needs PyTorch: pip install 'rsjax[torch]'"
      ) from None
    try:
      obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many kinds (pickle, zip, ...)
      first_line = str(e).splitlines()[0] if str(e) else type(e).__name__
      raise ValueError(f"cannot read {path!r} as a PyTorch checkpoint: {first_line}") from None
  if not isinstance(obj, Mapping):
    raise ValueError(f"expected a checkpoint dict or a state_dict; got {type(obj).__name__}")
  arch = obj.get("arch") if isinstance(obj.get("arch"), str) else None
  if "state_dict" in obj:
    obj = obj["state_dict"]
  arrays = {}
  for k, v in obj.items():
    if not (hasattr(v, "shape") and hasattr(v, "dtype")):
      raise ValueError(
        f"expected a state_dict of tensors (or a checkpoint with a 'state_dict' entry); the "
        f"entry {k!r} is a {type(v).__name__}"
      )
    arrays[str(k)] = _to_numpy(v)
  return arrays, arch


def parse_normalize(text: str) -> str | tuple[list[float], list[float]] | None:
  """The ``normalize=`` of a ``--normalize`` text: ``none``, a dataset name or ``MEAN/STD``.

  ``MEAN`` and ``STD`` are one number or comma-separated per-channel numbers,
  e.g. ``0.1307/0.3081`` or ``0.49,0.48,0.45/0.2,0.2,0.2``.
  """
  text = text.strip()
  if text.lower() == "none":
    return None
  if "/" not in text:
    if text not in NORMALIZATION:
      raise ValueError(
        f"--normalize {text}: expected none, a dataset name "
        f"({', '.join(sorted(NORMALIZATION))}) or MEAN/STD such as 0.1307/0.3081"
      )
    return text
  mean, _, std = text.partition("/")
  try:
    return ([float(v) for v in mean.split(",")], [float(v) for v in std.split(",")])
  except ValueError:
    raise ValueError(
      f"--normalize {text}: MEAN/STD must be numbers, e.g. 0.1307/0.3081 or "
      "0.49,0.48,0.45/0.2,0.2,0.2"
    ) from None


def _short(keys, limit: int = 8) -> str:
  keys = sorted(keys)
  more = f", ... ({len(keys) - limit} more)" if len(keys) > limit else ""
  return "[" + ", ".join(keys[:limit]) + more + "]"


class UnknownNormalizationError(ValueError):
  """A checkpoint's normalization layer holds no values and its architecture has no default."""

  def __init__(
    self,
    arch: str,
    *,
    how: str = "pass normalize=: None, a dataset name (mnist, "
    "cifar10, imagenet2012, ...) or a (mean, std) pair",
  ):
    self.arch = arch
    super().__init__(
      f"the checkpoint is Sequential(layer 0, {arch}) and its layer 0 (a normalization layer "
      "such as Cohen et al.'s NormalizeLayer, whose means and sds are not in the state_dict) "
      f"can be neither read nor inferred for {arch}: {how}"
    )


def _normalization(normalize, norm_sd, family, arch, *, wrapped: bool):
  """``(normalize, how)``: the normalization to use and one line saying where it comes from.

  ``wrapped``: the state dict is ``Sequential(layer 0, model)``, layer 0 being
  a normalization layer. Cohen et al.'s ``NormalizeLayer`` keeps its means and
  sds as plain attributes, outside the state dict: then only the CIFAR and
  ImageNet architectures have a known default (Cohen et al.'s
  ``get_architecture``); for any other, guessing could certify a different
  classifier, so the caller must say.
  """
  if not (isinstance(normalize, str) and normalize == "auto"):
    if normalize is None or (isinstance(normalize, str) and normalize.lower() == "none"):
      return None, "none (given)"
    return normalize, "given"
  for m_name, s_name in (("means", "sds"), ("mean", "std")):
    if m_name in norm_sd and s_name in norm_sd:
      return (
        [float(v) for v in np.ravel(norm_sd[m_name])],
        [float(v) for v in np.ravel(norm_sd[s_name])],
      ), "read from the checkpoint's layer 0"
  default = _DEFAULT_NORMALIZE[family]
  if wrapped and default is None:
    raise UnknownNormalizationError(arch)
  if default is None:
    return None, "none (the checkpoint has no normalization layer)"
  where = "layer 0" if wrapped else "the model"
  return [list(v) for v in NORMALIZATION[default]], (
    f"{default}'s, inferred from the architecture {arch} as in Cohen et al.'s get_architecture "
    f"({where} holds no values; pass normalize= to change it)"
  )


def describe_normalization(
  mean_std: tuple[Sequence[float], Sequence[float]] | None,
) -> str:
  """``mean (..) std (..)`` of a resolved normalization, or ``none``."""
  if mean_std is None:
    return "none"
  mean, std = mean_std
  fmt = lambda v: ", ".join(f"{x:g}" for x in v)  # noqa: E731
  return f"mean ({fmt(mean)}) std ({fmt(std)})"


def load_torch(
  path_or_state_dict: str | os.PathLike | Mapping[str, Any],
  arch: str | None = None,
  *,
  normalize: NormalizeArg = "auto",
  input_shape: Sequence[int] | None = None,
) -> tuple[nnx.Module, dict]:
  """Builds the rsjax model holding a PyTorch checkpoint's weights (eval use).

  Args:
    path_or_state_dict: a ``.pth`` file path (read with ``torch.load``), a
      checkpoint dict with a ``'state_dict'`` (and optionally ``'arch'``)
      entry, or a state dict (tensors or NumPy arrays). Keys may carry the
      ``module.`` (DataParallel) and ``0.``/``1.`` (``Sequential(NormalizeLayer,
      model)``) prefixes.
    arch: architecture name (see ``TORCH_ARCHITECTURES``; any
      ``cifar_resnetD`` with D = 6n + 2); default: the checkpoint's ``'arch'``
      entry, else recognized from the keys.
    normalize: "auto" (the normalization layer's ``means``/``sds`` buffers
      when the checkpoint stores them, else the architecture's dataset as in
      Cohen et al.: CIFAR-10 for the CIFAR ResNets, ImageNet for torchvision's;
      a LeNet without a normalization layer has none, and a LeNet inside
      ``Sequential(layer 0, net)`` whose layer 0 holds no values is refused:
      Cohen et al.'s ``NormalizeLayer`` keeps its means and sds out of the
      state dict, so they cannot be told from an identity), ``None`` (or
      ``"none"``), a dataset name or a ``(mean, std)`` pair. The one used is
      in ``config["normalization"]``; entries of layer 0 other than its
      means/sds are ignored with a warning.
    input_shape: ``(H, W, C)`` of one input; default 32x32 (CIFAR ResNets),
      224x224 (torchvision) or 28x28 (LeNet) with the checkpoint's channels.

  Returns:
    ``(model, config)``: the NNX model and a JSON-serializable config
    ``{"model", "num_classes", "input_shape", "model_kwargs", "torch_arch"}``
    that rebuilds it with ``rsjax.models.create_model`` (see
    ``rsjax.models.save_model``).

  Raises:
    ValueError: the checkpoint does not fit the architecture (one line listing
      the missing and unexpected keys and the known architectures).
  """
  raw, ckpt_arch = _read(path_or_state_dict)
  sd, norm_sd, wrapped = torch_keys.split_state_dict(raw)
  arch = arch or ckpt_arch or torch_keys.detect_arch(sd)
  family, name, kwargs = torch_keys.arch_family(arch)
  if family == "lenet":
    kwargs.update(torch_keys.lenet_kwargs(sd))
  num_classes, input_shape = _head_and_input(sd, family, input_shape)

  # The normalization layer holds no variables: it is set after the weights are
  # checked, so that a checkpoint that does not fit is reported by its keys.
  abstract = nnx.eval_shape(
    lambda: create_model(
      name, num_classes=num_classes, input_shape=input_shape, rngs=0, normalize=None, **kwargs
    )
  )
  graphdef, state = nnx.split(abstract)
  targets = dict(nnx.to_flat_state(state))
  stage_sizes = (
    kwargs["stage_sizes"] if family == "imagenet" else [(kwargs.get("depth", 2) - 2) // 6] * 3
  )
  sources = _sources(sd, torch_keys.layer_names(family, abstract, stage_sizes), targets, arch)
  new = _converted(sd, sources, targets, arch, family, kwargs, input_shape)
  norm, norm_how = _normalization(normalize, norm_sd, family, arch, wrapped=wrapped)
  _warn_unmapped(norm_sd)
  try:
    mean_std = resolve_normalization(norm, input_shape[-1])
  except ValueError as e:
    raise ValueError(f"{arch} with input_shape {input_shape}: {e} Pass normalize=...") from None
  model = nnx.merge(graphdef, nnx.from_flat_state(new))
  if mean_std is not None:
    model.normalize = nnx.data(Normalize(*mean_std))
  kwargs["normalize"] = norm
  config = {
    "model": name,
    "num_classes": num_classes,
    "input_shape": list(input_shape),
    "model_kwargs": kwargs,
    "torch_arch": arch,
    "normalization": f"{describe_normalization(mean_std)}: {norm_how}",
  }
  return model, config


def _head_and_input(
  sd: dict[str, np.ndarray], family: str, input_shape: Sequence[int] | None
) -> tuple[int, tuple[int, ...]]:
  """``(num_classes, input_shape)`` of the model of the state dict ``sd``.

  The classes are the head's outputs, the input shape (if not given) the family's
  default ``(H, W)`` with the stem's channels. Without the head or the stem, they are
  those of a stand-in model: the key check of :func:`_sources` reports what is missing.
  """
  head = sd.get(torch_keys.head_key(family, sd))
  num_classes = int(head.shape[0]) if head is not None and head.ndim else 1
  if input_shape is None:
    stem = sd.get("conv1.weight")
    channels = int(stem.shape[1]) if stem is not None and stem.ndim == 4 else 1
    input_shape = (*torch_keys.DEFAULT_HW[family], channels)
  return num_classes, tuple(int(s) for s in input_shape)


def _sources(
  sd: dict[str, np.ndarray], layers, targets: dict, arch: str
) -> dict[tuple, tuple[str, str, str]]:
  """``{variable path: (state-dict key, layer kind, PyTorch name)}`` of every model variable.

  Args:
    sd: the state dict (without layer 0).
    layers: ``(PyTorch module, variable path prefix, layer kind)`` of each layer
      (``rsjax.models._torch_keys.layer_names``).
    targets: ``{variable path: variable}`` of the abstract model.
    arch: the architecture (for the message).

  Raises:
    ValueError: keys the model expects are missing, or keys it does not know are there.
  """
  values, expected = {}, set()
  for t_module, path, kind in layers:
    for t_name, r_name in torch_keys.LAYER_NAMES[kind]:
      if path + (r_name,) in targets:
        key = f"{t_module}.{t_name}"
        expected.add(key)
        if key in sd:
          values[path + (r_name,)] = (key, kind, t_name)
  missing = expected - set(sd)
  unexpected = {k for k in sd if k not in expected and not k.endswith(torch_keys.IGNORED_SUFFIX)}
  if missing or unexpected:
    raise ValueError(
      f"checkpoint does not fit {arch}: missing keys {_short(missing)}, "
      f"unexpected keys {_short(unexpected)}; {torch_keys.KNOWN}"
    )
  return values


def _converted(
  sd: dict[str, np.ndarray],
  sources: dict[tuple, tuple[str, str, str]],
  targets: dict,
  arch: str,
  family: str,
  kwargs: dict,
  input_shape: tuple[int, ...],
) -> list:
  """``[(variable path, variable holding its float32 value in rsjax layout)]``.

  Args:
    sd: the state dict (without layer 0).
    sources: where each variable comes from (:func:`_sources`).
    targets: ``{variable path: variable}`` of the abstract model.
    arch, family, kwargs: the architecture, its family and its model kwargs.
    input_shape: ``(H, W, C)`` of one input (LeNet's first linear layer).

  Raises:
    ValueError: a value whose shape is not its variable's.
  """
  new, bad = [], []
  for path, var in targets.items():
    key, kind, t_name = sources[path]
    value = sd[key]
    if family == "lenet" and path == ("fc1", "kernel"):
      value = torch_keys.lenet_fc1(value, input_shape, kwargs["channels"][1], kwargs["padding"])
    value = torch_keys.convert_layout(kind, t_name, value, var.shape)
    if value.shape != tuple(var.shape):
      bad.append(f"{key} {tuple(sd[key].shape)} (needs {tuple(var.shape)} in rsjax layout)")
      continue
    new.append((path, var.replace(np.asarray(value, dtype=np.float32))))
  if bad:
    hint = f" with input_shape {input_shape}" if family == "lenet" else ""
    raise ValueError(
      f"checkpoint does not fit {arch}{hint}: shapes differ for {_short(bad, 4)}; "
      f"{torch_keys.KNOWN}"
    )
  return new


def _warn_unmapped(norm_sd: dict[str, np.ndarray]) -> None:
  """Warns of the entries of layer 0 other than its means/sds (ignored), at the line that
  called ``load_torch``."""
  unmapped = sorted(
    k
    for k in norm_sd
    if k not in ("means", "sds", "mean", "std") and not k.endswith(torch_keys.IGNORED_SUFFIX)
  )
  if unmapped:
    warnings.warn(
      f"layer 0 of the checkpoint holds entries that are not mapped (ignored): "
      f"{_short(unmapped)}; only a normalization layer's means/sds are read",
      stacklevel=3,  # load_torch's caller
    )


def from_torch(
  path_or_state_dict: str | os.PathLike | Mapping[str, Any],
  arch: str | None = None,
  *,
  normalize: NormalizeArg = "auto",
  input_shape: Sequence[int] | None = None,
) -> tuple[EvalApply, nnx.State]:
  """``(apply_fn, params)`` of a PyTorch checkpoint, ready for ``rsjax.certify``.

  ``apply_fn(params, x)`` maps NHWC inputs ``[b, H, W, C]`` in [0, 1] to logits
  (eval mode: BatchNorm with the checkpoint's running statistics). See
  ``load_torch`` for the arguments and supported architectures.

  Example::

    apply_fn, params = rsjax.models.from_torch("noise_0.25/checkpoint.pth.tar")
    cert = rsjax.certify(key, apply_fn, params, x, sigma=0.25, num_classes=10)
  """
  model, _ = load_torch(path_or_state_dict, arch, normalize=normalize, input_shape=input_shape)
  return to_apply_fn(model)
