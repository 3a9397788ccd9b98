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

PyTorch is needed only to read a checkpoint file (``pip install 'rsjax[torch]'``);
a state dict of NumPy arrays needs no PyTorch.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
from flax import nnx

from rsjax.models._bridge import EvalApply, to_apply_fn
from rsjax.models._layers import NORMALIZATION, Normalize, resolve_normalization
from rsjax.models._registry import create_model

__all__ = [
  "TORCH_ARCHITECTURES",
  "UnknownNormalizationError",
  "describe_normalization",
  "from_torch",
  "load_torch",
  "parse_normalize",
]

# torchvision ResNets: (block, blocks per stage).
_TORCHVISION = {
  "resnet18": ("basic", (2, 2, 2, 2)),
  "resnet34": ("basic", (3, 4, 6, 3)),
  "resnet50": ("bottleneck", (3, 4, 6, 3)),
  "resnet101": ("bottleneck", (3, 4, 23, 3)),
  "resnet152": ("bottleneck", (3, 8, 36, 3)),
}
TORCH_ARCHITECTURES = ("cifar_resnet20", "cifar_resnet110", *_TORCHVISION, "lenet")
_KNOWN = (
  "known architectures: cifar_resnetD (D = 6n + 2: cifar_resnet20, cifar_resnet110), "
  + ", ".join(_TORCHVISION)
  + ", lenet"
)

# Normalization of Cohen et al.'s ``get_architecture(arch, dataset)``: CIFAR-10
# for the CIFAR ResNets, ImageNet for torchvision's, none for MNIST (Consistency).
_DEFAULT_NORMALIZE = {"cifar": "cifar10", "imagenet": "imagenet2012", "lenet": None}
_DEFAULT_HW = {"cifar": (32, 32), "imagenet": (224, 224), "lenet": (28, 28)}

# torch parameter name -> rsjax variable name, per layer kind.
_NAMES = {
  "conv": (("weight", "kernel"), ("bias", "bias")),
  "linear": (("weight", "kernel"), ("bias", "bias")),
  "bn": (("weight", "scale"), ("bias", "bias"), ("running_mean", "mean"), ("running_var", "var")),
}
_IGNORED_SUFFIX = ".num_batches_tracked"


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


def _strip_module(key: str) -> str:
  while key.startswith("module."):
    key = key[len("module.") :]
  return key


def _split(sd: Mapping[str, np.ndarray]) -> tuple[dict, dict, bool]:
  """``(model entries, normalization-layer entries, wrapped)`` without ``module.`` / ``0.`` /
  ``1.``; ``wrapped``: the checkpoint is ``Sequential(layer 0, model)``."""
  sd = {_strip_module(k): v for k, v in sd.items()}
  if sd and all(k.startswith(("0.", "1.")) for k in sd) and any(k.startswith("1.") for k in sd):
    # Sequential(NormalizeLayer, model): the model is item 1.
    norm = {k[2:]: v for k, v in sd.items() if k.startswith("0.")}
    model = {_strip_module(k[2:]): v for k, v in sd.items() if k.startswith("1.")}
    return model, norm, True
  return sd, {}, False


def parse_normalize(text: str):
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


def _blocks_per_stage(sd, num_stages: int) -> tuple[int, ...]:
  counts = []
  for s in range(1, num_stages + 1):
    pat = re.compile(rf"layer{s}\.(\d+)\.")
    idx = {int(m.group(1)) for k in sd for m in [pat.match(k)] if m}
    counts.append(max(idx) + 1 if idx else 0)
  return tuple(counts)


def _detect(sd) -> str:
  """The architecture name of a (prefix-free) state dict, or a ValueError."""
  conv1 = sd.get("conv1.weight")
  if conv1 is not None and conv1.ndim == 4 and "layer1.0.conv1.weight" in sd:
    if "layer4.0.conv1.weight" in sd:
      block = "bottleneck" if "layer1.0.conv3.weight" in sd else "basic"
      stages = _blocks_per_stage(sd, 4)
      for name, spec in _TORCHVISION.items():
        if spec == (block, stages):
          return name
      raise ValueError(
        f"a torchvision-style ResNet with {block} blocks {stages} is not one of "
        f"{', '.join(_TORCHVISION)}; {_KNOWN}"
      )
    n = _blocks_per_stage(sd, 3)[0]
    return f"cifar_resnet{6 * n + 2}"
  if "conv2.weight" in sd and "fc1.weight" in sd:
    return "lenet"
  some = ", ".join(sorted(sd)[:6])
  raise ValueError(
    f"cannot recognize the architecture of the checkpoint (keys {some}, ...); pass "
    f"arch=...; {_KNOWN}"
  )


def _family(arch: str):
  """``(family, rsjax model name, model kwargs)`` of an architecture name."""
  m = re.fullmatch(r"cifar_resnet(\d+)", arch)
  if m:
    depth = int(m.group(1))
    if depth < 8 or (depth - 2) % 6:
      raise ValueError(f"{arch}: the depth of a CIFAR ResNet must be 6n + 2; {_KNOWN}")
    return "cifar", "cifar_resnet", {"depth": depth}
  if arch in _TORCHVISION:
    block, stages = _TORCHVISION[arch]
    return "imagenet", "imagenet_resnet", {"block": block, "stage_sizes": list(stages)}
  if arch == "lenet":
    return "lenet", "lenet", {}
  raise ValueError(f"unknown architecture {arch!r}; {_KNOWN}")


def _lenet_kwargs(sd) -> dict:
  """LeNet channels and hidden sizes from the weight shapes (padding 0).

  A missing weight gets a stand-in size of 1; the key check reports it.
  """

  def out_size(key):
    w = sd.get(key)
    return int(w.shape[0]) if w is not None and w.ndim >= 1 else 1

  hidden = []
  i = 1
  while f"fc{i + 1}.weight" in sd:
    hidden.append(out_size(f"fc{i}.weight"))
    i += 1
  return {
    "channels": [out_size("conv1.weight"), out_size("conv2.weight")],
    "hidden_sizes": hidden,
    "padding": 0,
  }


def _head_key(family: str, sd) -> str:
  if family == "lenet":
    i = 1
    while f"fc{i + 1}.weight" in sd:
      i += 1
    return f"fc{i}.weight"
  return "fc.weight"


def _layers(family: str, model, stage_sizes) -> list[tuple[str, tuple, str]]:
  """``(torch module name, rsjax module path, kind)`` of every layer of ``model``."""
  if family == "lenet":
    out = [("conv1", ("conv1",), "conv"), ("conv2", ("conv2",), "conv")]
    return out + [(f"fc{i}", (f"fc{i}",), "linear") for i in range(1, model.num_fc + 1)]
  out = [("conv1", ("stem_conv",), "conv"), ("bn1", ("stem_bn",), "bn")]
  names = [f"layer{s + 1}.{j}" for s, n in enumerate(stage_sizes) for j in range(n)]
  for i, (t, block) in enumerate(zip(names, model.blocks, strict=True)):
    for k in (1, 2, 3):
      if hasattr(block, f"conv{k}"):
        out += [
          (f"{t}.conv{k}", ("blocks", i, f"conv{k}"), "conv"),
          (f"{t}.bn{k}", ("blocks", i, f"bn{k}"), "bn"),
        ]
    if block.proj_conv is not None:
      out += [
        (f"{t}.downsample.0", ("blocks", i, "proj_conv"), "conv"),
        (f"{t}.downsample.1", ("blocks", i, "proj_bn"), "bn"),
      ]
  return out + [("fc", ("head",), "linear")]


def _convert(kind: str, torch_name: str, value: np.ndarray, target_shape) -> np.ndarray:
  if torch_name == "weight" and kind == "conv":
    return value.transpose(2, 3, 1, 0)  # OIHW -> HWIO
  if torch_name == "weight" and kind == "linear":
    out_f, in_f = value.shape
    if tuple(target_shape) == (in_f, out_f):
      return value.T
    return value  # the shape check reports it
  return value


def _lenet_fc1(value: np.ndarray, input_shape, channels: int, padding: int) -> np.ndarray:
  """LeNet's first linear weight ``[out, C*H*W]`` read from an NCHW flatten -> from NHWC."""
  h, w = (((s + 2 * padding - 4) // 2 - 4) // 2 for s in input_shape[:2])
  out_f, in_f = value.shape
  if in_f != channels * h * w:
    return value  # the shape check reports it
  return value.reshape(out_f, channels, h, w).transpose(0, 2, 3, 1).reshape(out_f, in_f)


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


def describe_normalization(mean_std) -> str:
  """``mean (..) std (..)`` of a resolved normalization, or ``none``."""
  if mean_std is None:
    return "none"
  mean, std = mean_std
  fmt = lambda v: ", ".join(f"{x:g}" for x in v)  # noqa: E731
  return f"mean ({fmt(mean)}) std ({fmt(std)})"


def load_torch(
  path_or_state_dict,
  arch: str | None = None,
  *,
  normalize="auto",
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
  sd, norm_sd, wrapped = _split(raw)
  arch = arch or ckpt_arch or _detect(sd)
  family, name, kwargs = _family(arch)
  if family == "lenet":
    kwargs.update(_lenet_kwargs(sd))
  # Without the head or the stem, build a stand-in model: the key check below
  # reports what is missing.
  head = sd.get(_head_key(family, sd))
  num_classes = int(head.shape[0]) if head is not None and head.ndim else 1
  if input_shape is None:
    stem = sd.get("conv1.weight")
    channels = int(stem.shape[1]) if stem is not None and stem.ndim == 4 else 1
    input_shape = (*_DEFAULT_HW[family], channels)
  input_shape = tuple(int(s) for s in input_shape)

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
  layers = _layers(family, abstract, stage_sizes)

  values, expected = {}, set()
  for t_module, path, kind in layers:
    for t_name, r_name in _NAMES[kind]:
      if path + (r_name,) in targets:
        key = f"{t_module}.{t_name}"
        expected.add(key)
        if key in sd:
          values[path + (r_name,)] = (key, kind, t_name)
  missing = expected - set(sd)
  unexpected = {k for k in sd if k not in expected and not k.endswith(_IGNORED_SUFFIX)}
  if missing or unexpected:
    raise ValueError(
      f"checkpoint does not fit {arch}: missing keys {_short(missing)}, "
      f"unexpected keys {_short(unexpected)}; {_KNOWN}"
    )
  new, bad = [], []
  for path, var in targets.items():
    key, kind, t_name = values[path]
    value = sd[key]
    if family == "lenet" and path == ("fc1", "kernel"):
      value = _lenet_fc1(value, input_shape, kwargs["channels"][1], kwargs["padding"])
    value = _convert(kind, t_name, value, var.shape)
    if value.shape != tuple(var.shape):
      bad.append(f"{key} {tuple(sd[key].shape)} (needs {tuple(var.shape)} in rsjax layout)")
      continue
    new.append((path, var.replace(np.asarray(value, dtype=np.float32))))
  if bad:
    hint = f" with input_shape {input_shape}" if family == "lenet" else ""
    raise ValueError(
      f"checkpoint does not fit {arch}{hint}: shapes differ for {_short(bad, 4)}; {_KNOWN}"
    )
  norm, norm_how = _normalization(normalize, norm_sd, family, arch, wrapped=wrapped)
  unmapped = sorted(
    k
    for k in norm_sd
    if k not in ("means", "sds", "mean", "std") and not k.endswith(_IGNORED_SUFFIX)
  )
  if unmapped:
    warnings.warn(
      f"layer 0 of the checkpoint holds entries that are not mapped (ignored): "
      f"{_short(unmapped)}; only a normalization layer's means/sds are read",
      stacklevel=2,
    )
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


def from_torch(
  path_or_state_dict,
  arch: str | None = None,
  *,
  normalize="auto",
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
