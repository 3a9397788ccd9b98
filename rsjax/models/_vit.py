"""ViT and BEiT image classifiers in NNX (the layout of Hugging Face transformers).

Carlini et al.'s classifiers for denoised smoothing: a ViT-B/16 at 224 px on CIFAR-10 and a
BEiT-L/16 at 512 px on ImageNet. One module serves both, with the switches that tell them apart:

* ViT (``ViTForImageClassification``): patch embedding (a stride-p conv), a [CLS] token,
  absolute position embeddings; pre-norm blocks ``h + attn(LN(h))``, ``h + mlp(LN(h))`` (exact
  GELU); a final layer norm; the head on the [CLS] token.
* BEiT (``BeitForImageClassification``): no bias on the keys, a learned relative position bias
  per block (a table of ``(2W-1)^2 + 3`` entries per head indexed by the offset between patches,
  with three entries for the [CLS] token), layer scale (``lambda_1``, ``lambda_2`` multiply the
  two branches), and mean pooling of the patch tokens followed by a layer norm.

Inputs are ``[b, H, W, C]`` in [0, 1], normalized inside with ``(x - mean) / std`` (0.5 and 0.5
for both public checkpoints, whose image processors map to [-1, 1]).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rsjax.models._layers import attention

__all__ = ["ViTConfig", "VisionTransformer", "create_vit"]


@dataclasses.dataclass(frozen=True)
class ViTConfig:
  """The fields of a transformers ``ViTConfig`` / ``BeitConfig`` this port uses.

  ``kind`` is ``"vit"`` or ``"beit"``; the BEiT switches default to BEiT's, the ViT ones to ViT's.
  """

  kind: str = "vit"
  image_size: int = 224
  patch_size: int = 16
  num_channels: int = 3
  hidden_size: int = 768
  num_hidden_layers: int = 12
  num_attention_heads: int = 12
  intermediate_size: int = 3072
  layer_norm_eps: float = 1e-12
  num_labels: int = 1000
  qkv_bias: bool = True
  use_absolute_position_embeddings: bool = True
  use_relative_position_bias: bool = False
  layer_scale_init_value: float = 0.0
  use_mean_pooling: bool = False
  mean: tuple[float, ...] = (0.5, 0.5, 0.5)
  std: tuple[float, ...] = (0.5, 0.5, 0.5)

  def __post_init__(self) -> None:
    if self.kind not in ("vit", "beit"):
      raise ValueError(f"kind must be 'vit' or 'beit', got {self.kind!r}")
    if self.image_size % self.patch_size:
      raise ValueError(f"patch_size {self.patch_size} must divide image_size {self.image_size}")
    if self.hidden_size % self.num_attention_heads:
      raise ValueError("num_attention_heads must divide hidden_size")
    object.__setattr__(self, "mean", tuple(float(m) for m in self.mean))
    object.__setattr__(self, "std", tuple(float(s) for s in self.std))

  @property
  def grid(self) -> int:
    return self.image_size // self.patch_size


@functools.lru_cache(maxsize=8)
def relative_position_index(grid: int) -> np.ndarray:
  """``[(g*g + 1)^2]`` indices into BEiT's bias table (transformers' construction)."""
  coords = np.stack(np.meshgrid(np.arange(grid), np.arange(grid), indexing="ij")).reshape(2, -1)
  rel = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0)
  rel += grid - 1
  rel[:, :, 0] *= 2 * grid - 1
  n = (2 * grid - 1) ** 2 + 3
  index = np.zeros((grid * grid + 1,) * 2, np.int64)
  index[1:, 1:] = rel.sum(-1)
  index[0, :] = n - 3
  index[:, 0] = n - 2
  index[0, 0] = n - 1
  return index.reshape(-1)


class Attention(nnx.Module):
  def __init__(self, cfg: ViTConfig, *, rngs: nnx.Rngs) -> None:
    d, vit = cfg.hidden_size, cfg.kind == "vit"
    qv_bias = cfg.qkv_bias if vit else True  # BEiT: q and v biased, k never
    self.q_proj = nnx.Linear(d, d, use_bias=qv_bias, rngs=rngs)
    self.k_proj = nnx.Linear(d, d, use_bias=cfg.qkv_bias and vit, rngs=rngs)
    self.v_proj = nnx.Linear(d, d, use_bias=qv_bias, rngs=rngs)
    self.o_proj = nnx.Linear(d, d, rngs=rngs)
    self.heads = cfg.num_attention_heads

  def __call__(self, x: jax.Array, bias: jax.Array | None) -> jax.Array:
    b, n, d = x.shape
    split = lambda a: a.reshape(b, n, self.heads, d // self.heads)  # noqa: E731
    q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
    return self.o_proj(attention(q, k, v, bias).reshape(b, n, d))


class MLP(nnx.Module):
  def __init__(self, cfg: ViTConfig, *, rngs: nnx.Rngs) -> None:
    self.fc1 = nnx.Linear(cfg.hidden_size, cfg.intermediate_size, rngs=rngs)
    self.fc2 = nnx.Linear(cfg.intermediate_size, cfg.hidden_size, rngs=rngs)

  def __call__(self, x: jax.Array) -> jax.Array:
    return self.fc2(jax.nn.gelu(self.fc1(x), approximate=False))


class RelativePositionBias(nnx.Module):
  def __init__(self, cfg: ViTConfig, *, rngs: nnx.Rngs) -> None:
    n = (2 * cfg.grid - 1) ** 2 + 3
    self.relative_position_bias_table = nnx.Param(jnp.zeros((n, cfg.num_attention_heads)))
    self.grid = cfg.grid

  def __call__(self) -> jax.Array:
    t = self.grid * self.grid + 1
    bias = self.relative_position_bias_table[relative_position_index(self.grid)]
    return bias.reshape(t, t, -1).transpose(2, 0, 1)[None]  # [1, heads, t, t]


class Layer(nnx.Module):
  def __init__(self, cfg: ViTConfig, *, rngs: nnx.Rngs) -> None:
    d, eps = cfg.hidden_size, cfg.layer_norm_eps
    self.layernorm_before = nnx.LayerNorm(d, epsilon=eps, rngs=rngs)
    self.attention = Attention(cfg, rngs=rngs)
    self.layernorm_after = nnx.LayerNorm(d, epsilon=eps, rngs=rngs)
    self.mlp = MLP(cfg, rngs=rngs)
    scale = cfg.layer_scale_init_value
    self.lambda_1 = nnx.Param(jnp.full((d,), scale)) if scale > 0 else None
    self.lambda_2 = nnx.Param(jnp.full((d,), scale)) if scale > 0 else None
    rel = cfg.use_relative_position_bias
    self.relative_position_bias = RelativePositionBias(cfg, rngs=rngs) if rel else None

  def __call__(
    self, h: jax.Array, index: jax.Array | None = None, mask: jax.Array | None = None
  ) -> jax.Array:
    """``h [b, t, d]``; ``index [b, t]``: which of the ``g*g + 1`` tokens each row of ``h`` is
    (None: all, in order); ``mask [b, 1, 1, t]``: a logit bias (0 or -inf) on the keys."""
    bias = None
    if self.relative_position_bias is not None:
      bias = self.relative_position_bias()
      if index is not None:  # [1, heads, T, T] -> [b, heads, t, t]: the kept tokens' pairs
        bias = bias[0][:, index[:, :, None], index[:, None, :]].transpose(1, 0, 2, 3)
    if mask is not None:
      bias = mask if bias is None else bias + mask
    a = self.attention(self.layernorm_before(h), bias)
    h = h + (a * self.lambda_1[...] if self.lambda_1 is not None else a)
    m = self.mlp(self.layernorm_after(h))
    return h + (m * self.lambda_2[...] if self.lambda_2 is not None else m)


class VisionTransformer(nnx.Module):
  """ViT / BEiT classifier: ``model(x [b, H, W, C] in [0, 1]) -> logits [b, num_labels]``.

  Args:
    config: a :class:`ViTConfig` (``rsjax.models.vit_config_from_transformers``).
    rngs: ``nnx.Rngs`` or int seed (weights are usually imported).
  """

  def __init__(self, config: ViTConfig, *, rngs: nnx.Rngs | int) -> None:
    rngs = nnx.Rngs(rngs) if isinstance(rngs, int) else rngs
    cfg = self.config = config
    d, p = cfg.hidden_size, cfg.patch_size
    self.projection = nnx.Conv(
      cfg.num_channels, d, (p, p), strides=(p, p), padding="VALID", rngs=rngs
    )
    self.cls_token = nnx.Param(jnp.zeros((1, 1, d)))
    n = cfg.grid * cfg.grid + 1
    abs_pos = cfg.use_absolute_position_embeddings
    self.position_embeddings = nnx.Param(jnp.zeros((1, n, d))) if abs_pos else None
    self.layers = nnx.List([Layer(cfg, rngs=rngs) for _ in range(cfg.num_hidden_layers)])
    eps = cfg.layer_norm_eps
    self.layernorm = None if cfg.use_mean_pooling else nnx.LayerNorm(d, epsilon=eps, rngs=rngs)
    self.pooler = nnx.LayerNorm(d, epsilon=eps, rngs=rngs) if cfg.use_mean_pooling else None
    self.classifier = nnx.Linear(d, cfg.num_labels, rngs=rngs)

  def __call__(
    self, x: jax.Array, tokens: jax.Array | None = None, valid: jax.Array | None = None
  ) -> jax.Array:
    """Logits ``[b, num_labels]`` of ``x [b, H, W, C]`` in [0, 1].

    Token dropping (Salman et al., CVPR 2022) with ``tokens [b, t]`` int: only those patch
    tokens (row-major indices into the ``g x g`` grid), the [CLS] token and their position
    embeddings go through the blocks. ``valid [b, t]`` bool (or ``[b, g*g]`` without
    ``tokens``) marks the tokens that count: the others are masked out of every attention's
    keys and of the mean pooling, so they change nothing. Without both the forward is the
    plain one.
    """
    cfg = self.config
    mean = jnp.asarray(cfg.mean, x.dtype)
    std = jnp.asarray(cfg.std, x.dtype)
    x = (x - mean) / std
    h = self._embed(x) if tokens is None else self._embed_tokens(x, tokens)
    b = h.shape[0]
    cls = jnp.broadcast_to(self.cls_token[...].astype(h.dtype), (b, 1, h.shape[-1]))
    h = jnp.concatenate([cls, h], axis=1)
    index = None
    if tokens is not None:
      index = jnp.concatenate([jnp.zeros((b, 1), tokens.dtype), tokens + 1], axis=1)
    if self.position_embeddings is not None:
      pos = self.position_embeddings[...].astype(h.dtype)
      h = h + (pos if index is None else pos[0][index])
    mask = None
    if valid is not None:
      valid = jnp.concatenate([jnp.ones((b, 1), bool), valid.astype(bool)], axis=1)
      mask = jnp.where(valid, 0.0, -jnp.inf).astype(jnp.float32)[:, None, None, :]
    for layer in self.layers:
      h = layer(h, index, mask)
    if self.pooler is not None:
      patches = h[:, 1:]
      if valid is None:
        pooled = self.pooler(patches.mean(axis=1))
      else:
        w = valid[:, 1:, None].astype(h.dtype)
        pooled = self.pooler((patches * w).sum(axis=1) / w.sum(axis=1))
    else:
      assert self.layernorm is not None
      pooled = self.layernorm(h)[:, 0]
    return self.classifier(pooled)

  def _embed(self, x: jax.Array) -> jax.Array:
    """``[b, g*g, d]``: every patch token of the normalized ``x``."""
    h = self.projection(x)
    return h.reshape(h.shape[0], -1, h.shape[-1])

  def _embed_tokens(self, x: jax.Array, tokens: jax.Array) -> jax.Array:
    """``[b, t, d]``: the patch tokens ``tokens [b, t]`` of the normalized ``x`` only (the
    stride-p convolution as a product with the kept patches' pixels)."""
    b, p, g = x.shape[0], self.config.patch_size, self.config.grid
    patches = x.reshape(b, g, p, g, p, x.shape[-1]).transpose(0, 1, 3, 2, 4, 5)
    patches = patches.reshape(b, g * g, p, p, x.shape[-1])
    kept = jnp.take_along_axis(patches, tokens[:, :, None, None, None], axis=1)
    kernel = self.projection.kernel[...].astype(x.dtype)  # [p, p, C, d]
    h = jnp.einsum("btijc,ijcd->btd", kept, kernel)
    bias = self.projection.bias
    return h if bias is None else h + bias[...].astype(h.dtype)


def create_vit(
  *,
  input_shape: tuple[int, ...],
  num_classes: int,
  rngs: nnx.Rngs,
  dtype: Any = None,
  **kwargs: Any,
) -> VisionTransformer:
  """``create_model("vit", ...)``: a square ``input_shape`` ``(S, S, C)``; ``kwargs`` are the
  other :class:`ViTConfig` fields (``dtype`` is unused: the engine casts for bf16)."""
  del dtype
  size, size2, channels = input_shape
  if size != size2:
    raise ValueError(f"a ViT needs square inputs, got {tuple(input_shape)}")
  kwargs.pop("normalize", None)  # normalized inside with the config's mean and std
  config = ViTConfig(image_size=size, num_channels=channels, num_labels=num_classes, **kwargs)
  return VisionTransformer(config, rngs=rngs)
