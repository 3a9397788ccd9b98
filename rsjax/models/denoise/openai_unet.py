"""An NNX port of OpenAI's diffusion ``UNetModel`` (improved-diffusion and guided-diffusion).

The architecture of Carlini et al.'s denoisers: improved-diffusion's CIFAR-10 model
(``cifar10_uncond_50M_500K``) and guided-diffusion's ImageNet ones (``256x256_diffusion_uncond``).
improved-diffusion's ``UNetModel`` is guided-diffusion's with ``num_head_channels=-1``,
``resblock_updown=False`` and the legacy attention order, so one port serves both. Images are
NHWC here (NCHW there); the module tree follows the reference's state dict
(``input_blocks[i].layers[j]``, ``middle_block``, ``output_blocks``, ``out``), so
:mod:`rsjax.models.denoise.openai_import` loads a checkpoint by name.

The forward pass (guided-diffusion ``unet.py``, ``nn.py``): ``[cos, sin]`` sinusoidal embedding
of the timestep the network receives (frequencies ``exp(-ln(1e4) k / (dim/2))``) -> time MLP
(linear, SiLU, linear); ``input_blocks`` (a stem conv, then per level ``num_res_blocks`` residual
blocks, each followed by attention at the listed downsampling rates, and a downsampler: a stride-2
conv, or a residual block that average-pools when ``resblock_updown``), every output pushed on a
skip stack; ``middle_block`` (residual block, attention, residual block); ``output_blocks``
concatenating one popped skip each; ``out`` = conv(SiLU(GroupNorm(h))). Every group norm has 32
groups, eps 1e-5, computed in float32.

A residual block: ``h = conv(SiLU(norm(x)))`` (resampling ``h`` and ``x`` between the SiLU and
the conv when it is an up/down block); the time embedding ``e = linear(SiLU(emb))`` is added
(``h + e``), or with ``use_scale_shift_norm`` split into ``scale, shift`` and applied as
``norm(h) * (1 + scale) + shift``; then ``conv(dropout(SiLU(.)))``; plus the skip (identity, or a
1x1 conv when the width changes). Attention: ``qkv`` (a 1x1 conv) of the normed input, heads of
``num_head_channels`` (else ``num_heads`` heads); the legacy order splits heads before q/k/v, the
new order q/k/v before heads; softmax(q k^T / sqrt(d)) v in float32 softmax; ``proj_out``;
plus the input.

A learned-sigma model (``learn_sigma``: 6 output channels for RGB) returns the noise estimate
epsilon in its first half of channels and the variance interpolation in the second;
:class:`OpenAIUNet` returns epsilon alone unless ``full=True``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from rsjax.models._layers import attention
from rsjax.models.denoise.unet import Upsample, padded_conv, timestep_embedding

__all__ = ["OpenAIUNetConfig", "OpenAIUNet"]

_GROUPS = 32
_EPS = 1e-5


@dataclasses.dataclass(frozen=True)
class OpenAIUNetConfig:
  """The arguments of OpenAI's ``UNetModel`` (2-D, unconditional).

  ``attention_resolutions`` are downsampling rates (``image_size // resolution`` of the
  scripts' flag, as ``create_model`` converts them); widths are ``int(mult * model_channels)``.
  ``out_channels`` is twice ``in_channels`` for a learned-sigma model.
  """

  in_channels: int = 3
  model_channels: int = 128
  out_channels: int = 3
  num_res_blocks: int = 2
  attention_resolutions: tuple[int, ...] = (2, 4)
  channel_mult: tuple[float, ...] = (1, 2, 2, 2)
  num_heads: int = 4
  num_head_channels: int = -1
  num_heads_upsample: int = -1
  use_scale_shift_norm: bool = True
  resblock_updown: bool = False
  use_new_attention_order: bool = False
  conv_resample: bool = True

  def __post_init__(self) -> None:
    set_ = lambda k, v: object.__setattr__(self, k, v)  # frozen: normalize  # noqa: E731
    set_("attention_resolutions", tuple(int(r) for r in self.attention_resolutions))
    set_("channel_mult", tuple(self.channel_mult))
    if self.out_channels not in (self.in_channels, 2 * self.in_channels):
      raise ValueError(
        f"out_channels must be in_channels (epsilon) or twice it (learned sigma), got "
        f"{self.out_channels} for {self.in_channels} input channels"
      )
    for w in self.widths:
      if w % _GROUPS:
        raise ValueError(f"every width must be a multiple of {_GROUPS} (group norm), got {w}")
    if not self.conv_resample:
      raise ValueError("conv_resample=False is not supported (every OpenAI checkpoint uses True)")

  @property
  def widths(self) -> tuple[int, ...]:
    """The channel width of each level."""
    return tuple(int(m * self.model_channels) for m in self.channel_mult)

  @property
  def learn_sigma(self) -> bool:
    return self.out_channels == 2 * self.in_channels

  def heads(self, channels: int, *, upsample: bool = False) -> int:
    """The number of attention heads at ``channels`` channels."""
    if self.num_head_channels != -1:
      if channels % self.num_head_channels:
        raise ValueError(f"num_head_channels {self.num_head_channels} must divide {channels}")
      return channels // self.num_head_channels
    if upsample and self.num_heads_upsample != -1:
      return self.num_heads_upsample
    return self.num_heads


def _norm(c: int, rngs: nnx.Rngs) -> nnx.GroupNorm:
  return nnx.GroupNorm(c, num_groups=_GROUPS, epsilon=_EPS, rngs=rngs)


def _group_norm(norm: nnx.GroupNorm, x: jax.Array) -> jax.Array:
  """GroupNorm32: in float32, cast back to the input's dtype."""
  return norm(x.astype(jnp.float32)).astype(x.dtype)


def _avg_pool2(x: jax.Array) -> jax.Array:
  b, h, w, c = x.shape
  return x.reshape(b, h // 2, 2, w // 2, 2, c).mean(axis=(2, 4))


def _nearest2(x: jax.Array) -> jax.Array:
  return jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)


class ResBlock(nnx.Module):
  """``ResBlock`` (torch names: ``in_layers.0/2``, ``emb_layers.1``, ``out_layers.0/3``,
  ``skip_connection``)."""

  TORCH = {
    "in_layers.0": "in_norm",
    "in_layers.2": "in_conv",
    "emb_layers.1": "emb",
    "out_layers.0": "out_norm",
    "out_layers.3": "out_conv",
    "skip_connection": "skip",
  }

  def __init__(
    self, cin: int, cout: int, temb: int, *, scale_shift: bool, resample: str, rngs: nnx.Rngs
  ) -> None:
    self.in_norm = _norm(cin, rngs)
    self.in_conv = padded_conv(cin, cout, 3, rngs)
    self.emb = nnx.Linear(temb, 2 * cout if scale_shift else cout, rngs=rngs)
    self.out_norm = _norm(cout, rngs)
    self.out_conv = padded_conv(cout, cout, 3, rngs)
    self.skip = padded_conv(cin, cout, 1, rngs) if cin != cout else None
    self.scale_shift = scale_shift
    self.resample = resample  # "", "up" or "down"

  def __call__(self, x: jax.Array, emb: jax.Array) -> jax.Array:
    h = nnx.silu(_group_norm(self.in_norm, x))
    if self.resample:
      op = _nearest2 if self.resample == "up" else _avg_pool2
      h, x = op(h), op(x)
    h = self.in_conv(h)
    e = self.emb(nnx.silu(emb)).astype(h.dtype)[:, None, None, :]
    if self.scale_shift:
      scale, shift = jnp.split(e, 2, axis=-1)
      h = _group_norm(self.out_norm, h) * (1 + scale) + shift
    else:
      h = _group_norm(self.out_norm, h + e)
    h = self.out_conv(nnx.silu(h))
    return (self.skip(x) if self.skip is not None else x) + h


class AttentionBlock(nnx.Module):
  """``AttentionBlock`` (torch names ``norm``, ``qkv``, ``proj_out``; 1x1 convs as linears)."""

  def __init__(self, c: int, *, heads: int, new_order: bool, rngs: nnx.Rngs) -> None:
    if c % heads:
      raise ValueError(f"{heads} attention heads must divide the width {c}")
    self.norm = _norm(c, rngs)
    self.qkv = nnx.Linear(c, 3 * c, rngs=rngs)
    self.proj_out = nnx.Linear(c, c, rngs=rngs)
    self.heads = heads
    self.new_order = new_order

  def __call__(self, x: jax.Array) -> jax.Array:
    b, hgt, wid, c = x.shape
    d = c // self.heads
    qkv = self.qkv(_group_norm(self.norm, x).reshape(b, hgt * wid, c))
    # Legacy: channels are (head, q/k/v, d); new order: (q/k/v, head, d).
    shape = (3, self.heads, d) if self.new_order else (self.heads, 3, d)
    qkv = qkv.reshape(b, hgt * wid, *shape)
    q, k, v = (qkv[:, :, i] if self.new_order else qkv[:, :, :, i] for i in range(3))
    out = attention(q, k, v).reshape(b, hgt * wid, c)
    return x + self.proj_out(out).reshape(b, hgt, wid, c)


class Downsample(nnx.Module):
  """Stride-2 3x3 conv, padding 1 (torch name ``op``)."""

  def __init__(self, c: int, *, rngs: nnx.Rngs) -> None:
    self.op = padded_conv(c, c, 3, rngs, stride=2)

  def __call__(self, x: jax.Array) -> jax.Array:
    return self.op(x)


class Sequence(nnx.Module):
  """``TimestepEmbedSequential``: the layers in order, residual blocks given the embedding."""

  def __init__(self, layers: list[nnx.Module]) -> None:
    self.layers = nnx.List(layers)

  def __call__(self, h: jax.Array, emb: jax.Array) -> jax.Array:
    for layer in self.layers:
      h = layer(h, emb) if isinstance(layer, ResBlock) else layer(h)
    return h


class OpenAIUNet(nnx.Module):
  """OpenAI's ``UNetModel`` in NNX, NHWC: ``model(x [b, H, W, C], t) -> eps [b, H, W, C]``.

  ``t`` (scalar or ``[b]``, int or float) is the timestep as the network receives it: the
  schedule index, or ``t * 1000 / num_steps`` for a model trained with ``rescale_timesteps``
  (the one-step denoiser's ``timestep_scale`` does that).

  Args:
    config: an :class:`OpenAIUNetConfig` (``rsjax.models.denoise.openai_import.config_from_flags``).
    rngs: ``nnx.Rngs`` or int seed (weights are usually imported).
  """

  TORCH = {
    "time_embed.0": "time_embed_1",
    "time_embed.2": "time_embed_2",
    "out.0": "out_norm",
    "out.2": "out_conv",
  }

  def __init__(self, config: OpenAIUNetConfig, *, rngs: nnx.Rngs | int) -> None:
    rngs = nnx.Rngs(rngs) if isinstance(rngs, int) else rngs
    cfg = self.config = config
    mc, widths = cfg.model_channels, cfg.widths
    temb = 4 * mc
    self.time_embed_1 = nnx.Linear(mc, temb, rngs=rngs)
    self.time_embed_2 = nnx.Linear(temb, temb, rngs=rngs)

    def res(cin: int, cout: int, resample: str = "") -> ResBlock:
      return ResBlock(
        cin, cout, temb, scale_shift=cfg.use_scale_shift_norm, resample=resample, rngs=rngs
      )

    def attn(c: int, up: bool) -> AttentionBlock:
      heads = cfg.heads(c, upsample=up)
      return AttentionBlock(c, heads=heads, new_order=cfg.use_new_attention_order, rngs=rngs)

    ch = widths[0]
    blocks: list[Sequence] = [Sequence([padded_conv(cfg.in_channels, ch, 3, rngs)])]
    skips, ds = [ch], 1
    for level, width in enumerate(widths):
      for _ in range(cfg.num_res_blocks):
        layers: list[nnx.Module] = [res(ch, width)]
        ch = width
        if ds in cfg.attention_resolutions:
          layers.append(attn(ch, False))
        blocks.append(Sequence(layers))
        skips.append(ch)
      if level != len(widths) - 1:
        down = res(ch, ch, "down") if cfg.resblock_updown else Downsample(ch, rngs=rngs)
        blocks.append(Sequence([down]))
        skips.append(ch)
        ds *= 2
    self.input_blocks = nnx.List(blocks)
    self.middle_block = Sequence([res(ch, ch), attn(ch, False), res(ch, ch)])
    out_blocks: list[Sequence] = []
    for level in reversed(range(len(widths))):
      for i in range(cfg.num_res_blocks + 1):
        layers = [res(ch + skips.pop(), widths[level])]
        ch = widths[level]
        if ds in cfg.attention_resolutions:
          layers.append(attn(ch, True))
        if level and i == cfg.num_res_blocks:
          layers.append(res(ch, ch, "up") if cfg.resblock_updown else Upsample(ch, rngs=rngs))
          ds //= 2
        out_blocks.append(Sequence(layers))
    self.output_blocks = nnx.List(out_blocks)
    self.out_norm = _norm(ch, rngs)
    self.out_conv = padded_conv(widths[0], cfg.out_channels, 3, rngs)

  def __call__(self, x: jax.Array, t: jax.Array | float, *, full: bool = False) -> jax.Array:
    """``x [b, H, W, in_channels]`` (model space, [-1, 1]), ``t`` scalar or ``[b]`` -> epsilon
    ``[b, H, W, in_channels]`` (``full``: every output channel, learned sigma's too)."""
    t = jnp.broadcast_to(jnp.asarray(t, jnp.float32), (x.shape[0],))
    emb = timestep_embedding(
      t, self.config.model_channels, flip_sin_to_cos=True, freq_shift=0.0
    ).astype(x.dtype)
    emb = self.time_embed_2(nnx.silu(self.time_embed_1(emb)))
    skips, h = [], x
    for block in self.input_blocks:
      h = block(h, emb)
      skips.append(h)
    h = self.middle_block(h, emb)
    for block in self.output_blocks:
      h = block(jnp.concatenate([h, skips.pop()], axis=-1), emb)
    out = self.out_conv(nnx.silu(_group_norm(self.out_norm, h)))
    return out if full else out[..., : self.config.in_channels]
