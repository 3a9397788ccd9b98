"""The PyTorch side of ``rsjax.models.load_torch``: state-dict keys and architectures.

Recognizes the architecture of a PyTorch state dict (Cohen et al.'s CIFAR
ResNets, torchvision's ResNets, the MNIST LeNet), strips the ``module.``
(DataParallel) and ``0.``/``1.`` (``Sequential(NormalizeLayer, model)``)
prefixes, names the torch module of every rsjax layer and converts weight
layouts (OIHW -> HWIO, ``[out, in]`` -> ``[in, out]``, LeNet's NCHW flatten ->
NHWC). No file reading and no PyTorch here: NumPy arrays only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
  "DEFAULT_HW",
  "IGNORED_SUFFIX",
  "KNOWN",
  "LAYER_NAMES",
  "TORCHVISION",
  "TORCH_ARCHITECTURES",
  "arch_family",
  "blocks_per_stage",
  "convert_layout",
  "detect_arch",
  "head_key",
  "layer_names",
  "lenet_fc1",
  "lenet_kwargs",
  "split_state_dict",
  "strip_module",
]

# torchvision ResNets: (block, blocks per stage).
TORCHVISION = {
  "resnet18": ("basic", (2, 2, 2, 2)),
  "resnet34": ("basic", (3, 4, 6, 3)),
  "resnet50": ("bottleneck", (3, 4, 6, 3)),
  "resnet101": ("bottleneck", (3, 4, 23, 3)),
  "resnet152": ("bottleneck", (3, 8, 36, 3)),
}
#: The PyTorch architectures ``from_torch`` reads (``--torch-arch``).
TORCH_ARCHITECTURES = ("cifar_resnet20", "cifar_resnet110", *TORCHVISION, "lenet")
KNOWN = (
  "known architectures: cifar_resnetD (D = 6n + 2: cifar_resnet20, cifar_resnet110), "
  + ", ".join(TORCHVISION)
  + ", lenet"
)


DEFAULT_HW = {"cifar": (32, 32), "imagenet": (224, 224), "lenet": (28, 28)}

# torch parameter name -> rsjax variable name, per layer kind.
LAYER_NAMES = {
  "conv": (("weight", "kernel"), ("bias", "bias")),
  "linear": (("weight", "kernel"), ("bias", "bias")),
  "bn": (("weight", "scale"), ("bias", "bias"), ("running_mean", "mean"), ("running_var", "var")),
}
IGNORED_SUFFIX = ".num_batches_tracked"


def strip_module(key: str) -> str:
  while key.startswith("module."):
    key = key[len("module.") :]
  return key


def split_state_dict(sd: Mapping[str, np.ndarray]) -> tuple[dict, dict, bool]:
  """``(model entries, normalization-layer entries, wrapped)`` without ``module.`` / ``0.`` /
  ``1.``; ``wrapped``: the checkpoint is ``Sequential(layer 0, model)``."""
  sd = {strip_module(k): v for k, v in sd.items()}
  if sd and all(k.startswith(("0.", "1.")) for k in sd) and any(k.startswith("1.") for k in sd):
    # Sequential(NormalizeLayer, model): the model is item 1.
    norm = {k[2:]: v for k, v in sd.items() if k.startswith("0.")}
    model = {strip_module(k[2:]): v for k, v in sd.items() if k.startswith("1.")}
    return model, norm, True
  return sd, {}, False


def blocks_per_stage(sd: Mapping[str, np.ndarray], num_stages: int) -> tuple[int, ...]:
  counts = []
  for s in range(1, num_stages + 1):
    pat = re.compile(rf"layer{s}\.(\d+)\.")
    idx = {int(m.group(1)) for k in sd for m in [pat.match(k)] if m}
    counts.append(max(idx) + 1 if idx else 0)
  return tuple(counts)


def detect_arch(sd: Mapping[str, np.ndarray]) -> str:
  """The architecture name of a (prefix-free) state dict, or a ValueError."""
  conv1 = sd.get("conv1.weight")
  if conv1 is not None and conv1.ndim == 4 and "layer1.0.conv1.weight" in sd:
    if "layer4.0.conv1.weight" in sd:
      block = "bottleneck" if "layer1.0.conv3.weight" in sd else "basic"
      stages = blocks_per_stage(sd, 4)
      for name, spec in TORCHVISION.items():
        if spec == (block, stages):
          return name
      raise ValueError(
        f"a torchvision-style ResNet with {block} blocks {stages} is not one of "
        f"{', '.join(TORCHVISION)}; {KNOWN}"
      )
    n = blocks_per_stage(sd, 3)[0]
    return f"cifar_resnet{6 * n + 2}"
  if "conv2.weight" in sd and "fc1.weight" in sd:
    return "lenet"
  some = ", ".join(sorted(sd)[:6])
  raise ValueError(
    f"cannot recognize the architecture of the checkpoint (keys {some}, ...); pass "
    f"arch=...; {KNOWN}"
  )


def arch_family(arch: str) -> tuple[str, str, dict[str, Any]]:
  """``(family, rsjax model name, model kwargs)`` of an architecture name."""
  m = re.fullmatch(r"cifar_resnet(\d+)", arch)
  if m:
    depth = int(m.group(1))
    if depth < 8 or (depth - 2) % 6:
      raise ValueError(f"{arch}: the depth of a CIFAR ResNet must be 6n + 2; {KNOWN}")
    return "cifar", "cifar_resnet", {"depth": depth}
  if arch in TORCHVISION:
    block, stages = TORCHVISION[arch]
    return "imagenet", "imagenet_resnet", {"block": block, "stage_sizes": list(stages)}
  if arch == "lenet":
    return "lenet", "lenet", {}
  raise ValueError(f"unknown architecture {arch!r}; {KNOWN}")


def lenet_kwargs(sd: Mapping[str, np.ndarray]) -> dict:
  """LeNet channels and hidden sizes from the weight shapes (padding 0).

  A missing weight gets a stand-in size of 1; the key check reports it.
  """

  def out_size(key: str) -> int:
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


def head_key(family: str, sd: Mapping[str, np.ndarray]) -> str:
  if family == "lenet":  # the last of fc1, fc2, ...
    return f"fc{len(lenet_kwargs(sd)['hidden_sizes']) + 1}.weight"
  return "fc.weight"


def layer_names(
  family: str, model: Any, stage_sizes: Sequence[int]
) -> list[tuple[str, tuple[str | int, ...], str]]:
  """``(torch module name, rsjax module path, kind)`` of every layer of ``model``.

  ``model`` is the family's NNX model, read by its attributes: a LeNet's ``num_fc``, a
  ResNet's ``blocks`` (hence ``Any``: ``family`` tells which, not the type).
  """
  out: list[tuple[str, tuple[str | int, ...], str]]
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


def convert_layout(
  kind: str, torch_name: str, value: np.ndarray, target_shape: Sequence[int]
) -> np.ndarray:
  if torch_name == "weight" and kind == "conv":
    return value.transpose(2, 3, 1, 0)  # OIHW -> HWIO
  if torch_name == "weight" and kind == "linear":
    out_f, in_f = value.shape
    if tuple(target_shape) == (in_f, out_f):
      return value.T
  return value  # a linear weight of another shape: the shape check reports it


def lenet_fc1(
  value: np.ndarray, input_shape: Sequence[int], channels: int, padding: int
) -> np.ndarray:
  """LeNet's first linear weight ``[out, C*H*W]`` read from an NCHW flatten -> from NHWC.

  ``input_shape`` is ``(H, W, C)`` of one input.
  """
  h, w = (((s + 2 * padding - 4) // 2 - 4) // 2 for s in input_shape[:2])
  out_f, in_f = value.shape
  if in_f != channels * h * w:
    return value  # the shape check reports it
  return value.reshape(out_f, channels, h, w).transpose(0, 2, 3, 1).reshape(out_f, in_f)
