"""Reference outputs of OpenAI's UNetModel and transformers' ViT/BEiT, kept for runs without them.

The reference packages (``guided_diffusion``, ``transformers``) need torch, so CI's torch-free
Python and any machine without them would skip the comparisons. Here the weights are a pure
function of the state dict's names and shapes (``seeded_state``: NumPy's generator seeded by the
tensor's position), so only names, shapes, inputs and the reference's outputs are stored
(``tests/reference_outputs.npz``, a few hundred KB); the NNX ports are checked against them
everywhere, and, where the reference packages are installed, the stored outputs against the
reference itself (``tests/test_reference_outputs.py``).

Regenerate (needs torch, ``guided-diffusion-sdk`` and ``transformers``)::

  python tests/reference_outputs.py
"""

from __future__ import annotations

import json
import os

import numpy as np

FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference_outputs.npz")
CASES = ("openai_cifar10", "openai_imagenet256", "vit", "beit")
# ImageNet-256 outputs are stored every 8th pixel (the file stays small).
STRIDE = {"openai_imagenet256": 8}


def seeded_state(names: list[str], shapes: list[tuple[int, ...]]) -> dict[str, np.ndarray]:
  """Random weights from names and shapes: norms and layer scales near 1, the rest of order
  ``1 / sqrt(fan_in)``, each tensor from ``default_rng(i)`` for its position ``i``."""
  state = {}
  for i, (name, shape) in enumerate(zip(names, shapes, strict=True)):
    n = np.random.default_rng(i).standard_normal(shape).astype(np.float32)
    one = ("norm" in name or "in_layers.0" in name or name.startswith("out.0")) and name.endswith(
      "weight"
    )
    if one or "lambda" in name:
      state[name] = 1.0 + 0.1 * n
    elif len(shape) == 1:
      state[name] = 0.1 * n
    else:
      state[name] = n / np.sqrt(max(int(np.prod(shape[1:])), 1))
  return state


def flags(case: str) -> dict:
  from rsjax.models.denoise import openai_import

  if case == "openai_cifar10":
    return {**openai_import.CIFAR10_UNCOND, "num_channels": 32}
  return {**openai_import.IMAGENET256_UNCOND, "num_channels": 32, "num_head_channels": 32}


VIT_SMALL = dict(
  hidden_size=64,
  num_hidden_layers=2,
  num_attention_heads=4,
  intermediate_size=96,
  image_size=32,
  patch_size=8,
  num_labels=10,
)
BEIT_EXTRA = dict(
  use_relative_position_bias=True,
  use_absolute_position_embeddings=False,
  use_mean_pooling=True,
  layer_scale_init_value=0.1,
)


def inputs(case: str) -> dict[str, np.ndarray]:
  """The inputs of a case: NHWC images (and the UNet's timesteps)."""
  rng = np.random.default_rng(100)
  if case.startswith("openai"):
    size = 32 if case == "openai_cifar10" else 256
    x = rng.standard_normal((2, size, size, 3)).astype(np.float32)
    t = np.array([289.5, 3.25] if case == "openai_cifar10" else [145, 7], np.float32)
    return {"x": x, "t": t}
  return {"x": rng.random((3, 32, 32, 3)).astype(np.float32)}


def reference_model(case: str):
  """The reference PyTorch module of a case (needs torch and the reference package)."""
  if case.startswith("openai"):
    from guided_diffusion.unet import UNetModel

    from rsjax.models.denoise import openai_import

    f = flags(case)
    c, _ = openai_import.config_from_flags(f)
    return UNetModel(
      image_size=f["image_size"],
      in_channels=3,
      model_channels=c.model_channels,
      out_channels=c.out_channels,
      num_res_blocks=c.num_res_blocks,
      attention_resolutions=c.attention_resolutions,
      dropout=f.get("dropout", 0.0),
      channel_mult=c.channel_mult,
      num_heads=c.num_heads,
      num_head_channels=c.num_head_channels,
      num_heads_upsample=c.num_heads_upsample,
      use_scale_shift_norm=c.use_scale_shift_norm,
      resblock_updown=c.resblock_updown,
      use_new_attention_order=c.use_new_attention_order,
    ).eval()
  import transformers

  if case == "vit":
    return transformers.ViTForImageClassification(transformers.ViTConfig(**VIT_SMALL)).eval()
  config = transformers.BeitConfig(**VIT_SMALL, **BEIT_EXTRA)
  return transformers.BeitForImageClassification(config).eval()


def reference_output(case: str, model) -> np.ndarray:
  """The reference module's output on the case's inputs, NHWC (logits for ViT/BEiT)."""
  import torch

  arrays = inputs(case)
  x = torch.tensor(arrays["x"].transpose(0, 3, 1, 2))
  with torch.no_grad():
    if case.startswith("openai"):
      out = model(x, torch.tensor(arrays["t"])).numpy().transpose(0, 2, 3, 1)
      s = STRIDE.get(case, 1)
      return out[:, ::s, ::s]
    return model(pixel_values=(x - 0.5) / 0.5).logits.numpy()


def load(case: str) -> tuple[list[str], list[tuple[int, ...]], np.ndarray, dict]:
  """``(names, shapes, output, config)`` stored for a case."""
  with np.load(FILE) as f:
    names = json.loads(str(f[f"{case}/names"]))
    shapes = [tuple(s) for s in json.loads(str(f[f"{case}/shapes"]))]
    return names, shapes, f[f"{case}/output"], json.loads(str(f[f"{case}/config"]))


def make() -> None:
  """Writes ``reference_outputs.npz`` from the reference packages."""
  import torch

  out = {}
  for case in CASES:
    model = reference_model(case)
    sd = model.state_dict()
    names = [k for k in sd if not k.endswith("relative_position_index")]
    shapes = [tuple(sd[k].shape) for k in names]
    state = seeded_state(names, shapes)
    model.load_state_dict({k: torch.tensor(v) for k, v in state.items()}, strict=False)
    config = flags(case) if case.startswith("openai") else model.config.to_dict()
    out[f"{case}/names"] = np.array(json.dumps(names))
    out[f"{case}/shapes"] = np.array(json.dumps(shapes))
    out[f"{case}/output"] = reference_output(case, model)
    out[f"{case}/config"] = np.array(json.dumps(config, default=str))
  np.savez_compressed(FILE, **out)


if __name__ == "__main__":
  make()
