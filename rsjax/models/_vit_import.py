"""Import Hugging Face transformers ViT / BEiT image classifiers into :class:`VisionTransformer`.

The state dict names of ``ViTForImageClassification`` / ``BeitForImageClassification``, in
transformers 5's layout (``vit.layers.0.attention.q_proj.weight``) or the older one of the
public checkpoints (``vit.encoder.layer.0.attention.attention.query.weight``,
``intermediate.dense``, ``output.dense``). Linear weights ``(out, in)`` -> ``(in, out)``, the patch
conv OIHW -> HWIO, layer norm ``weight`` -> ``scale``. Every tensor must find its parameter and
every parameter a tensor, with the same shape; BEiT's ``relative_position_index`` buffers are
recomputed, not read.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from flax import nnx

from rsjax.models._torch_state import load_torch_state
from rsjax.models._vit import VisionTransformer, ViTConfig

__all__ = [
  "vit_config_from_transformers",
  "load_transformers_state_dict",
  "vit_from_transformers",
  "vit_model_config",
]

_LEGACY = [
  (r"\.encoder\.layer\.", ".layers."),
  (r"attention\.attention\.relative_position_bias\.", "relative_position_bias."),
  (r"attention\.attention\.query", "attention.q_proj"),
  (r"attention\.attention\.key", "attention.k_proj"),
  (r"attention\.attention\.value", "attention.v_proj"),
  (r"attention\.output\.dense", "attention.o_proj"),
  (r"intermediate\.dense", "mlp.fc1"),
  (r"\.output\.dense", ".mlp.fc2"),
]
_TOP = {
  "embeddings.cls_token": "cls_token",
  "embeddings.position_embeddings": "position_embeddings",
  "embeddings.patch_embeddings.projection": "projection",
  "pooler.layernorm": "pooler",
}


def vit_config_from_transformers(config: Mapping[str, Any]) -> ViTConfig:
  """A :class:`ViTConfig` from a transformers ``config.json`` dict (``model_type`` vit or beit).

  Raises:
    ValueError: another model type or a setting the port does not have (one line).
  """
  kind = config.get("model_type")
  if kind not in ("vit", "beit"):
    raise ValueError(f"model_type {kind!r} is not supported (vit or beit)")
  if config.get("hidden_act", "gelu") != "gelu":
    raise ValueError(f"hidden_act {config['hidden_act']!r} is not supported (gelu)")
  if config.get("use_shared_relative_position_bias"):
    raise ValueError("use_shared_relative_position_bias is not supported (per-layer only)")
  labels = config.get("num_labels") or len(config.get("id2label") or {}) or 1000
  common = dict(
    kind=kind,
    image_size=int(config.get("image_size", 224)),
    patch_size=int(config.get("patch_size", 16)),
    num_channels=int(config.get("num_channels", 3)),
    hidden_size=int(config.get("hidden_size", 768)),
    num_hidden_layers=int(config.get("num_hidden_layers", 12)),
    num_attention_heads=int(config.get("num_attention_heads", 12)),
    intermediate_size=int(config.get("intermediate_size", 3072)),
    layer_norm_eps=float(config.get("layer_norm_eps", 1e-12)),
    num_labels=int(labels),
  )
  if kind == "beit":
    return ViTConfig(
      **common,
      use_absolute_position_embeddings=bool(config.get("use_absolute_position_embeddings", False)),
      use_relative_position_bias=bool(config.get("use_relative_position_bias", False)),
      layer_scale_init_value=float(config.get("layer_scale_init_value", 0.1)),
      use_mean_pooling=bool(config.get("use_mean_pooling", True)),
    )
  return ViTConfig(**common, qkv_bias=bool(config.get("qkv_bias", True)))


def _target(model: VisionTransformer, key: str) -> tuple[Any, str] | None:
  """``(module, leaf)`` for a state dict key, None for a buffer that is recomputed."""
  if key.endswith("relative_position_index"):
    return None
  for old, new in _LEGACY:
    key = re.sub(old, new, key)
  key = re.sub(r"^(vit|beit)\.", "", key)
  *parts, leaf = key.split(".")
  path = ".".join(parts)
  if key in _TOP or path in _TOP:
    name = _TOP.get(key) or _TOP[path]
    return (model, name) if key in _TOP else (getattr(model, name), leaf)
  node: Any = model
  for part in parts:
    node = node[int(part)] if part.isdigit() else getattr(node, part)
    if node is None:
      raise AttributeError(part)
  return node, leaf


def load_transformers_state_dict(
  model: VisionTransformer, state_dict: Mapping[str, Any]
) -> VisionTransformer:
  """Loads a transformers ViT / BEiT classifier state dict into ``model`` (in place; returned).

  Raises:
    ValueError: a tensor with no parameter, of another shape, or a parameter left unset.
  """
  return load_torch_state(
    model,
    state_dict,
    lambda key: _target(model, key),
    source="weight",
    plain_params=True,
  )


def vit_from_transformers(hf_model: Any) -> VisionTransformer:
  """The NNX port of a live transformers ``ViTForImageClassification`` /
  ``BeitForImageClassification`` (its config and weights)."""
  config = vit_config_from_transformers(hf_model.config.to_dict())
  shapes = nnx.eval_shape(lambda: VisionTransformer(config, rngs=nnx.Rngs(0)))
  return load_transformers_state_dict(shapes, hf_model.state_dict())


def vit_model_config(config: ViTConfig, **extra: Any) -> dict[str, Any]:
  """The model directory config of a :class:`VisionTransformer` (``rsjax.models.save_model``;
  ``load_model`` rebuilds it by the name ``"vit"``), with ``extra`` entries (``dataset``, ...)."""
  kwargs = dataclasses.asdict(config)
  for k in ("image_size", "num_channels", "num_labels"):
    kwargs.pop(k)
  kwargs["mean"], kwargs["std"] = list(config.mean), list(config.std)
  shape = [config.image_size, config.image_size, config.num_channels]
  return {
    "model": "vit",
    "num_classes": config.num_labels,
    "input_shape": shape,
    "model_kwargs": kwargs,
    **extra,
  }
