"""An NNX port of diffusers' ``UNet2DModel`` (the architecture of the DDPM checkpoints).

Same module tree and parameter names as diffusers (``down_blocks[i].resnets[j].conv1``, ...), so
a diffusers ``state_dict`` loads by name (:mod:`rsjax.models.denoise.diffusers_import`). Images are
NHWC here (NCHW in diffusers). The supported configuration is that of the public DDPM
checkpoints (``google/ddpm-cifar10-32`` and the like): positional time embedding, SiLU, the
"default" ResNet time shift, ``DownBlock2D`` / ``AttnDownBlock2D`` and ``UpBlock2D`` /
``AttnUpBlock2D`` blocks, a mid block with attention, convolutional resampling.

The forward pass (diffusers ``unet_2d.py``, ``unet_2d_blocks.py``, ``resnet.py``):
sinusoidal embedding of ``t`` -> time MLP; ``conv_in``; down blocks pushing every resnet
(+ attention) output and every downsampler output on a skip stack; mid block (resnet,
attention, resnet); up blocks concatenating one popped skip before each resnet;
``conv_out(silu(conv_norm_out(h)))``: the noise prediction epsilon.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from flax import nnx

from rsjax.models._layers import attention

__all__ = ["UNetConfig", "UNet2DModel", "timestep_embedding"]

_DOWN = ("DownBlock2D", "AttnDownBlock2D")
_UP = ("UpBlock2D", "AttnUpBlock2D")


@dataclasses.dataclass(frozen=True)
class UNetConfig:
  """The fields of diffusers' ``UNet2DModel`` config that this port uses.

  Defaults are those of the google/ddpm-cifar10-32 checkpoint except the widths.
  ``attention_head_dim`` None means one head per attention layer (diffusers: head dim = C).
  """

  in_channels: int = 3
  out_channels: int = 3
  block_out_channels: tuple[int, ...] = (32, 64)
  layers_per_block: int = 2
  down_block_types: tuple[str, ...] = ("DownBlock2D", "AttnDownBlock2D")
  up_block_types: tuple[str, ...] = ("AttnUpBlock2D", "UpBlock2D")
  downsample_padding: int = 0
  flip_sin_to_cos: bool = False
  freq_shift: int = 1
  norm_num_groups: int = 8
  norm_eps: float = 1e-6
  attention_head_dim: int | None = None
  attn_norm_num_groups: int | None = None
  mid_block_scale_factor: float = 1.0
  center_input_sample: bool = False
  add_attention: bool = True

  def __post_init__(self):
    set_ = lambda k, v: object.__setattr__(self, k, v)  # frozen: normalize  # noqa: E731
    for k in ("block_out_channels", "down_block_types", "up_block_types"):
      set_(k, tuple(getattr(self, k)))
    n = len(self.block_out_channels)
    if n < 1 or len(self.down_block_types) != n or len(self.up_block_types) != n:
      raise ValueError(
        "block_out_channels, down_block_types and up_block_types must have the "
        f"same length >= 1, got {n}, {len(self.down_block_types)}, "
        f"{len(self.up_block_types)}"
      )
    for t in self.down_block_types:
      if t not in _DOWN:
        raise ValueError(f"down block type {t!r} is not supported (supported: {_DOWN})")
    for t in self.up_block_types:
      if t not in _UP:
        raise ValueError(f"up block type {t!r} is not supported (supported: {_UP})")
    for c in self.block_out_channels:
      if c % self.norm_num_groups:
        raise ValueError(
          f"norm_num_groups {self.norm_num_groups} must divide every channel "
          f"width, got {self.block_out_channels}"
        )

  @classmethod
  def from_diffusers(cls, config: dict) -> UNetConfig:
    """From a diffusers ``config.json`` dict; an unsupported setting is an error."""
    need = {
      "time_embedding_type": "positional",
      "act_fn": "silu",
      "resnet_time_scale_shift": "default",
      "class_embed_type": None,
      "num_class_embeds": None,
      "downsample_type": "conv",
      "upsample_type": "conv",
    }
    for k, want in need.items():
      if config.get(k, want) != want:
        raise ValueError(f"UNet2DModel config {k}={config[k]!r} is not supported (only {want!r})")
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {k: v for k, v in config.items() if k in names}
    # diffusers' own defaults where the config leaves a field out.
    defaults = dict(
      downsample_padding=1,
      flip_sin_to_cos=True,
      freq_shift=0,
      norm_num_groups=32,
      norm_eps=1e-5,
      attention_head_dim=8,
    )
    return cls(**{**defaults, **kwargs})


def timestep_embedding(
  t: jax.Array, dim: int, *, flip_sin_to_cos: bool, freq_shift: float, max_period: float = 10000.0
) -> jax.Array:
  """Sinusoidal embedding of timesteps ``t [b]`` (int or float) -> ``[b, dim]`` float32.

  diffusers' ``get_timestep_embedding``: frequencies ``exp(-ln(max_period) k / (dim/2 -
  freq_shift))``, ``[sin, cos]`` (``[cos, sin]`` when flipped), zero-padded for odd ``dim``.
  """
  half = dim // 2
  exponent = -math.log(max_period) * jnp.arange(half, dtype=jnp.float32) / (half - freq_shift)
  emb = jnp.asarray(t, jnp.float32)[:, None] * jnp.exp(exponent)[None, :]
  emb = jnp.concatenate([jnp.sin(emb), jnp.cos(emb)], axis=-1)
  if flip_sin_to_cos:
    emb = jnp.concatenate([emb[:, half:], emb[:, :half]], axis=-1)
  if dim % 2:
    emb = jnp.pad(emb, ((0, 0), (0, 1)))
  return emb


def padded_conv(cin, cout, k, rngs, *, stride=1, padding=None):
  """A ``k x k`` convolution, zero-padded by ``k // 2`` on each side unless ``padding`` says."""
  pad = ((k // 2, k // 2),) * 2 if padding is None else padding
  return nnx.Conv(cin, cout, (k, k), strides=(stride, stride), padding=pad, rngs=rngs)


class ResnetBlock(nnx.Module):
  """diffusers ``ResnetBlock2D`` (time shift "default", no resampling)."""

  def __init__(
    self,
    cin: int,
    cout: int,
    temb: int,
    *,
    groups: int,
    eps: float,
    output_scale_factor: float = 1.0,
    rngs: nnx.Rngs,
  ):
    self.norm1 = nnx.GroupNorm(cin, num_groups=groups, epsilon=eps, rngs=rngs)
    self.conv1 = padded_conv(cin, cout, 3, rngs)
    self.time_emb_proj = nnx.Linear(temb, cout, rngs=rngs)
    self.norm2 = nnx.GroupNorm(cout, num_groups=groups, epsilon=eps, rngs=rngs)
    self.conv2 = padded_conv(cout, cout, 3, rngs)
    self.conv_shortcut = padded_conv(cin, cout, 1, rngs) if cin != cout else None
    self.output_scale_factor = output_scale_factor

  def __call__(self, x, temb):
    h = self.conv1(nnx.silu(self.norm1(x)))
    h = h + self.time_emb_proj(nnx.silu(temb))[:, None, None, :]
    h = self.conv2(nnx.silu(self.norm2(h)))
    skip = self.conv_shortcut(x) if self.conv_shortcut is not None else x
    return (skip + h) / self.output_scale_factor


class Attention(nnx.Module):
  """diffusers' spatial self-attention block (``Attention`` from the deprecated attn block)."""

  def __init__(
    self,
    c: int,
    *,
    head_dim: int | None,
    groups: int,
    eps: float,
    rescale_output_factor: float = 1.0,
    rngs: nnx.Rngs,
  ):
    head_dim = c if head_dim is None else head_dim
    if c % head_dim:
      raise ValueError(f"attention_head_dim {head_dim} must divide the channel width {c}")
    self.heads = c // head_dim
    self.group_norm = nnx.GroupNorm(c, num_groups=groups, epsilon=eps, rngs=rngs)
    self.to_q = nnx.Linear(c, c, rngs=rngs)
    self.to_k = nnx.Linear(c, c, rngs=rngs)
    self.to_v = nnx.Linear(c, c, rngs=rngs)
    self.to_out = nnx.Linear(c, c, rngs=rngs)
    self.rescale_output_factor = rescale_output_factor

  def __call__(self, x):
    b, hgt, wid, c = x.shape
    h = self.group_norm(x).reshape(b, hgt * wid, c)
    split = lambda a: a.reshape(b, hgt * wid, self.heads, c // self.heads)  # noqa: E731
    q, k, v = split(self.to_q(h)), split(self.to_k(h)), split(self.to_v(h))
    out = attention(q, k, v).reshape(b, hgt * wid, c)
    out = self.to_out(out).reshape(b, hgt, wid, c)
    return (out + x) / self.rescale_output_factor


class Downsample(nnx.Module):
  """Stride-2 3x3 conv; ``padding=0`` pads right and bottom by one (diffusers ``Downsample2D``)."""

  def __init__(self, c: int, *, padding: int, rngs: nnx.Rngs):
    pad = ((0, 1), (0, 1)) if padding == 0 else ((padding, padding),) * 2
    self.conv = padded_conv(c, c, 3, rngs, stride=2, padding=pad)

  def __call__(self, x):
    return self.conv(x)


class Upsample(nnx.Module):
  """Nearest-neighbour x2, then a 3x3 conv (diffusers ``Upsample2D``)."""

  def __init__(self, c: int, *, rngs: nnx.Rngs):
    self.conv = padded_conv(c, c, 3, rngs)

  def __call__(self, x):
    return self.conv(jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2))


def _attentions(c: int, num: int, cfg: UNetConfig, rngs: nnx.Rngs) -> nnx.List:
  """``num`` attention layers of a down or up block at ``c`` channels."""
  g, eps = cfg.norm_num_groups, cfg.norm_eps
  return nnx.List(
    [
      Attention(c, head_dim=cfg.attention_head_dim, groups=g, eps=eps, rngs=rngs)
      for _ in range(num)
    ]
  )


class DownBlock(nnx.Module):
  def __init__(self, cin, cout, temb, *, num_layers, attn, downsample, cfg: UNetConfig, rngs):
    g, eps = cfg.norm_num_groups, cfg.norm_eps
    self.resnets = nnx.List(
      [
        ResnetBlock(cin if i == 0 else cout, cout, temb, groups=g, eps=eps, rngs=rngs)
        for i in range(num_layers)
      ]
    )
    self.attentions = _attentions(cout, num_layers if attn else 0, cfg, rngs)
    self.downsamplers = nnx.List(
      [Downsample(cout, padding=cfg.downsample_padding, rngs=rngs)] if downsample else []
    )

  def __call__(self, h, temb, skips):
    for i, resnet in enumerate(self.resnets):
      h = resnet(h, temb)
      if len(self.attentions):
        h = self.attentions[i](h)
      skips.append(h)
    for down in self.downsamplers:
      h = down(h)
      skips.append(h)
    return h


class UpBlock(nnx.Module):
  def __init__(self, cin, prev, cout, temb, *, num_layers, attn, upsample, cfg: UNetConfig, rngs):
    g, eps = cfg.norm_num_groups, cfg.norm_eps
    resnets = []
    for i in range(num_layers):
      skip = cin if i == num_layers - 1 else cout
      resnets.append(
        ResnetBlock((prev if i == 0 else cout) + skip, cout, temb, groups=g, eps=eps, rngs=rngs)
      )
    self.resnets = nnx.List(resnets)
    self.attentions = _attentions(cout, num_layers if attn else 0, cfg, rngs)
    self.upsamplers = nnx.List([Upsample(cout, rngs=rngs)] if upsample else [])

  def __call__(self, h, temb, skips):
    for i, resnet in enumerate(self.resnets):
      h = resnet(jnp.concatenate([h, skips.pop()], axis=-1), temb)
      if len(self.attentions):
        h = self.attentions[i](h)
    for up in self.upsamplers:
      h = up(h)
    return h


class MidBlock(nnx.Module):
  def __init__(self, c, temb, *, cfg: UNetConfig, rngs):
    g, eps, s = cfg.norm_num_groups, cfg.norm_eps, cfg.mid_block_scale_factor
    self.resnets = nnx.List(
      [
        ResnetBlock(c, c, temb, groups=g, eps=eps, output_scale_factor=s, rngs=rngs)
        for _ in range(2)
      ]
    )
    self.attentions = nnx.List(
      [
        Attention(
          c,
          head_dim=cfg.attention_head_dim,
          groups=cfg.attn_norm_num_groups or g,
          eps=eps,
          rescale_output_factor=s,
          rngs=rngs,
        )
      ]
      if cfg.add_attention
      else []
    )

  def __call__(self, h, temb):
    h = self.resnets[0](h, temb)
    for attn in self.attentions:
      h = attn(h)
    return self.resnets[1](h, temb)


class TimestepEmbedding(nnx.Module):
  def __init__(self, cin, dim, *, rngs):
    self.linear_1 = nnx.Linear(cin, dim, rngs=rngs)
    self.linear_2 = nnx.Linear(dim, dim, rngs=rngs)

  def __call__(self, e):
    return self.linear_2(nnx.silu(self.linear_1(e)))


class UNet2DModel(nnx.Module):
  """diffusers' ``UNet2DModel`` in NNX, NHWC: ``model(x [b, H, W, C], t [b] or scalar) -> eps``.

  Args:
    config: a :class:`UNetConfig` (or ``UNetConfig.from_diffusers(config_json)``).
    rngs: ``nnx.Rngs`` or int seed for initialization (weights are usually imported or trained).
  """

  def __init__(self, config: UNetConfig, *, rngs: nnx.Rngs | int):
    rngs = nnx.Rngs(rngs) if isinstance(rngs, int) else rngs
    cfg = self.config = config
    ch = cfg.block_out_channels
    temb = ch[0] * 4
    self.conv_in = padded_conv(cfg.in_channels, ch[0], 3, rngs)
    self.time_embedding = TimestepEmbedding(ch[0], temb, rngs=rngs)
    n = len(ch)
    down, cout = [], ch[0]
    for i, kind in enumerate(cfg.down_block_types):
      cin, cout = cout, ch[i]
      down.append(
        DownBlock(
          cin,
          cout,
          temb,
          num_layers=cfg.layers_per_block,
          attn=kind == "AttnDownBlock2D",
          downsample=i < n - 1,
          cfg=cfg,
          rngs=rngs,
        )
      )
    self.down_blocks = nnx.List(down)
    self.mid_block = MidBlock(ch[-1], temb, cfg=cfg, rngs=rngs)
    rev = list(reversed(ch))
    up, cout = [], rev[0]
    for i, kind in enumerate(cfg.up_block_types):
      prev, cout = cout, rev[i]
      cin = rev[min(i + 1, n - 1)]
      up.append(
        UpBlock(
          cin,
          prev,
          cout,
          temb,
          num_layers=cfg.layers_per_block + 1,
          attn=kind == "AttnUpBlock2D",
          upsample=i < n - 1,
          cfg=cfg,
          rngs=rngs,
        )
      )
    self.up_blocks = nnx.List(up)
    self.conv_norm_out = nnx.GroupNorm(
      ch[0], num_groups=cfg.norm_num_groups, epsilon=cfg.norm_eps, rngs=rngs
    )
    self.conv_out = padded_conv(ch[0], cfg.out_channels, 3, rngs)

  def __call__(self, x: jax.Array, t) -> jax.Array:
    """``x [b, H, W, in_channels]`` (model space, [-1, 1]), ``t`` scalar or ``[b]`` ->
    ``[b, H, W, out_channels]``."""
    cfg = self.config
    if cfg.center_input_sample:
      x = 2 * x - 1
    t = jnp.broadcast_to(jnp.asarray(t, jnp.float32), (x.shape[0],))
    emb = timestep_embedding(
      t, cfg.block_out_channels[0], flip_sin_to_cos=cfg.flip_sin_to_cos, freq_shift=cfg.freq_shift
    )
    temb = self.time_embedding(emb.astype(x.dtype))  # bf16 stays bf16
    h = self.conv_in(x)
    skips = [h]
    for block in self.down_blocks:
      h = block(h, temb, skips)
    h = self.mid_block(h, temb)
    for block in self.up_blocks:
      h = block(h, temb, skips)
    return self.conv_out(nnx.silu(self.conv_norm_out(h)))
