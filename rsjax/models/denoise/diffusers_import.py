"""Import diffusers ``UNet2DModel`` weights into the NNX port (:class:`rsjax.models.denoise.unet.UNet2DModel`).

Parameter names are diffusers' (``down_blocks.1.attentions.0.to_q.weight``); the old names of the
attention weights (``query``, ``key``, ``value``, ``proj_attn``) are accepted too. Layouts are
converted: a conv kernel OIHW -> HWIO, a linear weight ``(out, in)`` -> ``(in, out)``, a group
norm's ``weight`` -> ``scale``. Every tensor must find its parameter and every parameter a
tensor, with the same shape.

torch and diffusers are needed only to read a PyTorch file or convert a live diffusers module
(the optional extra ``rsjax[diffusion]``); a ``.safetensors`` file reads with ``safetensors``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from flax import nnx

from rsjax.models._torch_state import load_torch_state, read_weights
from rsjax.models.denoise.unet import UNet2DModel, UNetConfig

__all__ = ["load_state_dict", "from_diffusers", "load_diffusers_dir", "unet_shapes"]

_LEGACY = {"query": "to_q", "key": "to_k", "value": "to_v", "proj_attn": "to_out"}


def _module_at(model: nnx.Module, names: list[str]):
  node = model
  for name in names:
    node = node[int(name)] if name.isdigit() else getattr(node, _LEGACY.get(name, name))
  return node


def _path(key: str) -> tuple[list[str], str]:
  parts = key.split(".")
  # ``to_out.0`` (a ModuleList with the dropout after it) is the one Linear ``to_out`` here.
  if "to_out" in parts and parts[parts.index("to_out") + 1] == "0":
    del parts[parts.index("to_out") + 1]
  return parts[:-1], parts[-1]


def load_state_dict(model: UNet2DModel, state_dict: Mapping) -> UNet2DModel:
  """Loads a diffusers ``UNet2DModel`` state dict into ``model`` (in place; also returned).

  Raises:
    ValueError: a tensor with no parameter, of another shape, or a parameter left unset.
  """

  def locate(key: str) -> tuple[nnx.Module, str]:
    names, leaf = _path(key)
    return _module_at(model, names), leaf

  return load_torch_state(
    model, state_dict, locate, source="diffusers weight", hint=" (another configuration?)"
  )


def unet_shapes(config: UNetConfig) -> UNet2DModel:
  """The model with shapes only (no initialization cost): every parameter is then loaded."""
  return nnx.eval_shape(lambda: UNet2DModel(config, rngs=nnx.Rngs(0)))


def from_diffusers(unet: Any) -> UNet2DModel:
  """The NNX port of a live diffusers ``UNet2DModel`` (its config and weights)."""
  config = UNetConfig.from_diffusers(dict(unet.config))
  return load_state_dict(unet_shapes(config), unet.state_dict())


def load_diffusers_dir(path: str | os.PathLike) -> UNet2DModel:
  """The NNX port of a saved diffusers ``UNet2DModel`` (``save_pretrained`` layout): its
  ``config.json`` and ``diffusion_pytorch_model.safetensors`` (or ``.bin``, which needs torch).

  Raises:
    FileNotFoundError: no config or weight file.
  """
  path = os.fspath(path)
  cfg_file = os.path.join(path, "config.json")
  if not os.path.exists(cfg_file):
    raise FileNotFoundError(f"no config.json in {path!r} (a diffusers UNet2DModel directory)")
  with open(cfg_file, encoding="utf-8") as f:
    config = UNetConfig.from_diffusers(json.load(f))
  files = [os.path.join(path, f"diffusion_pytorch_model.{ext}") for ext in ("safetensors", "bin")]
  found = [f for f in files if os.path.exists(f)]
  if not found:
    raise FileNotFoundError(f"no diffusion_pytorch_model.safetensors or .bin in {path!r}")
  return load_state_dict(unet_shapes(config), read_weights(found[0]))
