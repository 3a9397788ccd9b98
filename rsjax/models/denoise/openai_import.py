"""Import OpenAI improved-diffusion / guided-diffusion checkpoints into :class:`OpenAIUNet`.

A checkpoint is a ``UNetModel`` state dict (``cifar10_uncond_50M_500K.pt``,
``256x256_diffusion_uncond.pt``); the architecture and the diffusion are given by the flags its
scripts were run with (``--num_channels 128 --learn_sigma True ...``, as a dict here). Defaults
for the flags left out are those of the named code base (``model_and_diffusion_defaults``):
they differ (improved-diffusion rescales timesteps by default, guided-diffusion does not).

Flags that change what the one-step denoiser computes are applied (architecture,
``noise_schedule``, ``diffusion_steps``, ``rescale_timesteps``, ``learn_sigma``) or refused with
one line (``class_cond``, ``predict_xstart``, ``timestep_respacing``); flags that affect only
training or multi-step sampling are ignored (``dropout``: eval mode; ``use_kl``, ``sigma_small``,
``rescale_learned_sigmas``, ``use_checkpoint``, ``use_fp16``: the weights are read as float32).

Layouts: conv kernel OIHW -> HWIO, a 1x1 conv1d ``(out, in, 1)`` (attention ``qkv``,
``proj_out``) and a linear ``(out, in)`` -> ``(in, out)``, group norm ``weight`` -> ``scale``.
Every tensor must find its parameter and every parameter a tensor, with the same shape.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from flax import nnx

from rsjax.models._torch_state import load_torch_state, read_weights
from rsjax.models.denoise.openai_unet import OpenAIUNet, OpenAIUNetConfig

__all__ = [
  "CODEBASES",
  "CIFAR10_UNCOND",
  "IMAGENET256_UNCOND",
  "FLAGS_FILE",
  "config_from_flags",
  "load_state_dict",
  "openai_shapes",
  "load_openai",
  "load_openai_dir",
]

_COMMON = dict(
  image_size=64,
  num_channels=128,
  num_res_blocks=2,
  num_heads=4,
  num_heads_upsample=-1,
  attention_resolutions="16,8",
  dropout=0.0,
  learn_sigma=False,
  sigma_small=False,
  class_cond=False,
  diffusion_steps=1000,
  noise_schedule="linear",
  timestep_respacing="",
  use_kl=False,
  predict_xstart=False,
  rescale_learned_sigmas=True,
  use_checkpoint=False,
  use_scale_shift_norm=True,
)
#: ``model_and_diffusion_defaults()`` of each code base.
CODEBASES: dict[str, dict[str, Any]] = {
  "improved-diffusion": {**_COMMON, "rescale_timesteps": True},
  "guided-diffusion": {
    **_COMMON,
    "num_head_channels": -1,
    "channel_mult": "",
    "resblock_updown": False,
    "use_fp16": False,
    "use_new_attention_order": False,
    "rescale_timesteps": False,
    "rescale_learned_sigmas": False,
  },
}
#: improved-diffusion's CIFAR-10 model (``cifar10_uncond_50M_500K.pt``, its README's flags).
CIFAR10_UNCOND: dict[str, Any] = dict(
  codebase="improved-diffusion",
  image_size=32,
  num_channels=128,
  num_res_blocks=3,
  learn_sigma=True,
  dropout=0.3,
  diffusion_steps=4000,
  noise_schedule="cosine",
)
#: guided-diffusion's ImageNet model (``256x256_diffusion_uncond.pt``, its README's flags).
IMAGENET256_UNCOND: dict[str, Any] = dict(
  codebase="guided-diffusion",
  attention_resolutions="32,16,8",
  class_cond=False,
  diffusion_steps=1000,
  image_size=256,
  learn_sigma=True,
  noise_schedule="linear",
  num_channels=256,
  num_head_channels=64,
  num_res_blocks=2,
  resblock_updown=True,
  use_fp16=True,
  use_scale_shift_norm=True,
)
#: The flags file of an OpenAI denoiser directory (its ``checkpoint`` key names the weights).
FLAGS_FILE = "openai_flags.json"

_CHANNEL_MULT: dict[str, dict[int, tuple[float, ...]]] = {
  "improved-diffusion": {256: (1, 1, 2, 2, 4, 4), 64: (1, 2, 3, 4), 32: (1, 2, 2, 2)},
  "guided-diffusion": {
    512: (0.5, 1, 1, 2, 2, 4, 4),
    256: (1, 1, 2, 2, 4, 4),
    128: (1, 1, 2, 3, 4),
    64: (1, 2, 3, 4),
  },
}
_REFUSED = {
  "class_cond": (False, "class-conditional models need a label; only unconditional ones"),
  "predict_xstart": (False, "the one-step denoiser needs an epsilon-predicting model"),
  "timestep_respacing": ("", "a respaced diffusion is not the schedule the model was trained on"),
}


def config_from_flags(flags: Mapping[str, Any]) -> tuple[OpenAIUNetConfig, dict[str, Any]]:
  """``(config, diffusion)`` from the scripts' flags (``codebase`` names the defaults).

  ``diffusion`` holds ``schedule`` (a :func:`rsjax.models.denoise.diffusion.schedule_from` spec) and
  ``timestep_scale`` (``1000 / diffusion_steps`` with ``rescale_timesteps``, else 1.0).

  Raises:
    ValueError: an unknown code base or flag, or a refused setting (one line).
  """
  flags = dict(flags)
  base = flags.pop("codebase", None)
  if base not in CODEBASES:
    raise ValueError(f"flags need 'codebase': one of {sorted(CODEBASES)}, got {base!r}")
  if unknown := sorted(set(flags) - set(CODEBASES[base])):
    raise ValueError(f"unknown {base} flags {unknown}")
  f = {**CODEBASES[base], **flags}
  for name, (want, why) in _REFUSED.items():
    if f[name] != want:
      raise ValueError(f"OpenAI flag {name}={f[name]!r} is not supported: {why}")
  size = int(f["image_size"])
  mult: Any = f.get("channel_mult", "")
  if mult:
    mult = tuple(float(m) if "." in m else int(m) for m in str(mult).split(","))
  elif size in _CHANNEL_MULT[base]:
    mult = _CHANNEL_MULT[base][size]
  else:
    raise ValueError(f"{base} has no channel_mult for image_size {size}; give channel_mult")
  config = OpenAIUNetConfig(
    in_channels=3,
    model_channels=int(f["num_channels"]),
    out_channels=6 if f["learn_sigma"] else 3,
    num_res_blocks=int(f["num_res_blocks"]),
    attention_resolutions=tuple(size // int(r) for r in str(f["attention_resolutions"]).split(",")),
    channel_mult=mult,
    num_heads=int(f["num_heads"]),
    num_head_channels=int(f.get("num_head_channels", -1)),
    num_heads_upsample=int(f["num_heads_upsample"]),
    use_scale_shift_norm=bool(f["use_scale_shift_norm"]),
    resblock_updown=bool(f.get("resblock_updown", False)),
    use_new_attention_order=bool(f.get("use_new_attention_order", False)),
  )
  steps = int(f["diffusion_steps"])
  diffusion = {
    "schedule": {"kind": "openai", "name": f["noise_schedule"], "num_steps": steps},
    "timestep_scale": 1000.0 / steps if f["rescale_timesteps"] else 1.0,
    "image_size": size,
  }
  if f["noise_schedule"] not in ("linear", "cosine"):
    raise ValueError(f"OpenAI noise_schedule {f['noise_schedule']!r} is not linear or cosine")
  return config, diffusion


def _module_at(model: nnx.Module, parts: list[str]) -> nnx.Module:
  node: Any = model
  i = 0
  while i < len(parts):
    names: dict[str, str] = getattr(node, "TORCH", {})
    two = ".".join(parts[i : i + 2])
    if two in names:
      node, i = getattr(node, names[two]), i + 2
    elif parts[i] in names:
      node, i = getattr(node, names[parts[i]]), i + 1
    elif parts[i].isdigit():
      seq = node.layers if hasattr(node, "layers") else node
      node, i = seq[int(parts[i])], i + 1
    else:
      node, i = getattr(node, parts[i]), i + 1
    if node is None:
      raise AttributeError(parts[i - 1])
  return node


def load_state_dict(model: OpenAIUNet, state_dict: Mapping[str, Any]) -> OpenAIUNet:
  """Loads an OpenAI ``UNetModel`` state dict into ``model`` (in place; also returned).

  Raises:
    ValueError: a tensor with no parameter, of another shape, or a parameter left unset.
  """

  def locate(key: str) -> tuple[nnx.Module, str]:
    *parts, leaf = key.split(".")
    return _module_at(model, parts), leaf

  return load_torch_state(model, state_dict, locate, source="OpenAI weight", hint=" (other flags?)")


def openai_shapes(config: OpenAIUNetConfig) -> OpenAIUNet:
  """The model with shapes only (no initialization cost): every parameter is then loaded."""
  return nnx.eval_shape(lambda: OpenAIUNet(config, rngs=nnx.Rngs(0)))


def load_openai(state_dict: Mapping[str, Any], flags: Mapping[str, Any]) -> tuple[OpenAIUNet, dict]:
  """``(model, diffusion)``: the NNX port of a checkpoint's state dict under its flags."""
  config, diffusion = config_from_flags(flags)
  return load_state_dict(openai_shapes(config), state_dict), diffusion


def load_openai_dir(path: str | os.PathLike) -> tuple[OpenAIUNet, dict]:
  """``(model, diffusion)`` of a directory holding ``openai_flags.json`` (the flags, with
  ``codebase``, and ``checkpoint``: the weight file's name, default ``model.pt``).

  A ``.pt`` file needs torch; a ``.safetensors`` or ``.npz`` one does not.

  Raises:
    FileNotFoundError: no flags or weight file.
  """
  path = os.fspath(path)
  with open(os.path.join(path, FLAGS_FILE), encoding="utf-8") as f:
    flags = json.load(f)
  weights = os.path.join(path, flags.pop("checkpoint", "model.pt"))
  if not os.path.exists(weights):
    raise FileNotFoundError(f"no checkpoint {weights!r} (named by {FLAGS_FILE})")
  return load_openai(read_weights(weights), flags)
