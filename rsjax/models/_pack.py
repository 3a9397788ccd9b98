"""Narrow-stage packing: ``g`` samples side by side in the channels of a ResNet's first stage.

A GPU runs the 16-channel 3x3 convolutions of a CIFAR ResNet's first stage on a
slow kernel (ResNet-110 bf16 on an H200: about 57 TFLOP/s, 76% of the convolution
time, against about 300 TFLOP/s at 32 and 64 channels). ``pack_narrow_stage(model, g)``
runs that stage on ``g`` samples packed into the channel axis instead:

* the input enters packed, ``[B, H, W, C] -> [B/g, H, W, g*C]`` (sample ``b = k g + m``
  is channel block ``m`` of packed row ``k``; a batch that is not a multiple of ``g`` is
  padded with zero images inside the call and their logits sliced off, so any batch works);
* every convolution of the stem and of the blocks before the first one with 32 or more
  channels has the block-diagonal kernel ``diag(W, ..., W)`` (``g`` copies; ``g``
  times the FLOPs, on ``g``-times-wider convolutions), biases and batch norm statistics
  tiled ``g`` times, the input normalization's per-channel constants too;
* the output of the narrow stage is unpacked, ``[B/g, H, W, g*C] -> [B, H, W, C]``,
  before the first wide block, which with the rest of the network runs as before.

"The noise drawn straight into the packed layout" means here: the engine draws
each sample's noise exactly as for the unpacked model (sample ``j`` of input
``i`` from its ``fold_in`` keys, so the noise values never change) and the packed
model's first operation is the reshape/transpose of its input. That permutation
is elementwise-fusible: XLA puts it in the loop fusion that already reads the
noisy batch (its cast to the compute dtype, the input normalization), so it adds
no pass over the images of its own where the model starts with one (rsjax's
ResNets normalize their input; ``tests/test_packing.py`` reads the optimized
program on the CPU). A model without normalization at float32 has one extra copy
of the (3-channel) batch.

The packed network computes the same function up to rounding: each output
channel sums the same products plus ``(g - 1) C k^2`` exact zeros, in another
order. Counts can differ from the unpacked model's only where two top logits are
within a rounding error, as between any two machines, so packing, like the
precision, is a declared choice of the run (``rsjax certify --pack``), never made
behind the user's back. One difference: a non-finite activation of one sample
makes the ``g - 1`` samples packed with it non-finite too (``0 * inf = nan``),
and the engine refuses counts with any non-finite logit either way.

Equality is proved by construction, not by a probe: only rsjax's ResNets
(``ResNetBase``: ``BasicResNet``, ``CifarResNet``, ``ResNet20``, ``ResNet110``, ...,
with their own ``features``) whose narrow blocks are ``BasicBlock`` or
``Bottleneck`` of plain convolutions (one feature group, no mask), batch norms
over the last axis or folded ones, are packed; every other model is refused.
Batch norm folding (``fold_batch_norm``) works before or after packing.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from rsjax.models._fold import Identity, conv_like
from rsjax.models._layers import Normalize
from rsjax.models._resnet import BasicBlock, Bottleneck, ResNetBase, stem

__all__ = ["NARROW_CHANNELS", "PackedResNet", "pack_batch", "pack_narrow_stage", "unpack_batch"]

#: A convolution with fewer channels (in and out) than this is narrow.
NARROW_CHANNELS = 32


def pack_batch(x: jax.Array, g: int) -> jax.Array:
  """``[B, H, W, C] -> [B/g, H, W, g*C]``: sample ``k g + m`` is channel block ``m`` of row ``k``."""
  b, h, w, c = x.shape
  return x.reshape(b // g, g, h, w, c).transpose(0, 2, 3, 1, 4).reshape(b // g, h, w, g * c)


def unpack_batch(x: jax.Array, g: int) -> jax.Array:
  """``[B/g, H, W, g*C] -> [B, H, W, C]``, the inverse of :func:`pack_batch`."""
  r, h, w, gc = x.shape
  c = gc // g
  return x.reshape(r, h, w, g, c).transpose(0, 3, 1, 2, 4).reshape(r * g, h, w, c)


def _block_diagonal(kernel: jax.Array, g: int) -> jax.Array:
  """``[kh, kw, I, O] -> [kh, kw, g*I, g*O]`` with ``g`` copies of ``kernel`` on the diagonal.

  Written by copies, not by a matmul with the identity: exact on every backend
  (a GPU's default float32 matmul would round the weights to TF32).
  """
  kh, kw, i, o = kernel.shape
  out = jnp.zeros((kh, kw, g, i, g, o), kernel.dtype)
  for m in range(g):
    out = out.at[:, :, m, :, m, :].set(kernel)
  return out.reshape(kh, kw, g * i, g * o)


def _packed_conv(conv: nnx.Conv, g: int, where: str) -> nnx.Conv:
  if conv.feature_group_count != 1 or conv.mask is not None:
    raise ValueError(
      f"{where}: a grouped or masked convolution (feature_group_count "
      f"{conv.feature_group_count}) cannot be packed"
    )
  has_bias, precision = conv.bias is not None, conv.precision
  new = conv_like(conv, g * conv.in_features, g * conv.out_features, use_bias=has_bias,
                  precision=precision)  # fmt: skip
  new.kernel.set_value(_block_diagonal(conv.kernel.get_value(), g))
  if conv.bias is not None:
    new.bias.set_value(jnp.tile(conv.bias.get_value(), g))
  return new


def _packed_bn(bn: nnx.BatchNorm, g: int, where: str) -> nnx.BatchNorm:
  if bn.axis not in (-1, 3) or bn.axis_name is not None:
    raise ValueError(f"{where}: a batch norm over axis {bn.axis} cannot be packed")
  new = nnx.BatchNorm(
    g * bn.num_features,
    use_running_average=bn.use_running_average,
    momentum=bn.momentum,
    epsilon=bn.epsilon,
    dtype=bn.dtype,
    param_dtype=bn.param_dtype,
    use_bias=bn.use_bias,
    use_scale=bn.use_scale,
    rngs=nnx.Rngs(0),
  )
  for name in ("mean", "var", "scale", "bias"):
    old = getattr(bn, name)
    if old is not None:
      getattr(new, name).set_value(jnp.tile(old.get_value(), g))
  return new


def _packed_layer(layer, g: int, where: str):
  if isinstance(layer, nnx.Conv):
    return _packed_conv(layer, g, where)
  if isinstance(layer, nnx.BatchNorm):
    return _packed_bn(layer, g, where)
  if layer is None or isinstance(layer, Identity):
    return layer
  raise ValueError(f"{where}: cannot pack a {type(layer).__name__}")


def _packed_block(block: nnx.Module, g: int, where: str) -> nnx.Module:
  """A copy of a residual block with every layer packed."""
  new = nnx.clone(block)
  for name, layer in list(vars(block).items()):
    if not name.startswith("_"):
      setattr(new, name, _packed_layer(layer, g, f"{where}.{name}"))
  return new


def _is_narrow(block: nnx.Module) -> bool:
  convs = [c for c in vars(block).values() if isinstance(c, nnx.Conv)]
  return all(max(c.in_features, c.out_features) < NARROW_CHANNELS for c in convs)


def _packable(model: nnx.Module) -> int:
  """The number of narrow blocks of ``model``; a clear ``ValueError`` if it cannot be packed."""
  name = type(model).__name__
  cls = type(model)
  if not (
    isinstance(model, ResNetBase)
    and cls.features is ResNetBase.features
    and cls.__call__ is ResNetBase.__call__
  ):
    raise ValueError(
      f"pack_narrow_stage cannot pack {name}: only rsjax's ResNets (BasicResNet, "
      "CifarResNet, ResNet20, ResNet110, ...) have a narrow stage it can prove equal when packed"
    )
  width = max(model.stem_conv.in_features, model.stem_conv.out_features)
  if width >= NARROW_CHANNELS:
    raise ValueError(
      f"pack_narrow_stage cannot pack {name}: it has no stage with fewer than "
      f"{NARROW_CHANNELS} channels (its stem has {model.stem_conv.out_features})"
    )
  narrow = 0
  for block in model.blocks:
    if type(block) not in (BasicBlock, Bottleneck):
      raise ValueError(
        f"pack_narrow_stage cannot pack {name}: its block {type(block).__name__} is not a "
        "BasicBlock or Bottleneck of rsjax.models"
      )
    if not _is_narrow(block):
      break
    narrow += 1
  return narrow


class PackedResNet(nnx.Module):
  """A ResNet whose stem and narrow blocks run on ``g`` samples packed in the channel axis.

  Made by :func:`pack_narrow_stage` (module docstring); call it like the model it
  packs: ``x [B, H, W, C]`` in [0, 1] -> logits ``[B, num_classes]``, any ``B``.
  """

  def __init__(self, model: ResNetBase, g: int, narrow: int):
    name = type(model).__name__
    self.g = int(g)
    self.packed_from = name
    norm = model.normalize
    if norm is not None:
      tile = lambda v: v if len(v) == 1 else v * self.g  # noqa: E731
      norm = Normalize(tile(norm.mean), tile(norm.std))
    self.normalize = norm
    self.stem_conv = _packed_layer(model.stem_conv, self.g, f"{name}.stem_conv")
    self.stem_bn = _packed_layer(model.stem_bn, self.g, f"{name}.stem_bn")
    self.stem_max_pool = bool(model.stem_max_pool)
    self.narrow = nnx.List(
      [_packed_block(b, self.g, f"{name}.blocks[{i}]") for i, b in enumerate(model.blocks[:narrow])]
    )
    self.blocks = nnx.List([nnx.clone(b) for b in model.blocks[narrow:]])
    self.head = nnx.clone(model.head)

  def __call__(self, x: jax.Array) -> jax.Array:
    """``x`` of shape ``[b, H, W, C]`` in [0, 1] -> logits ``[b, num_classes]``."""
    if x.ndim != 4:
      raise ValueError(f"{self.packed_from} packed by {self.g} takes [B, H, W, C]; got {x.shape}")
    b = x.shape[0]
    pad = -b % self.g
    if pad:  # zero images fill the last packed row; their logits are sliced off
      x = jnp.pad(x, ((0, pad), (0, 0), (0, 0), (0, 0)))
    x = stem(self, pack_batch(x, self.g))
    for block in self.narrow:
      x = block(x)
    x = unpack_batch(x, self.g)
    for block in self.blocks:
      x = block(x)
    return self.head(x.mean(axis=(1, 2)))[:b]


def pack_narrow_stage(model: nnx.Module, g: int) -> nnx.Module:
  """A copy of ``model`` that runs its narrow stage on ``g`` samples packed in the channels.

  Args:
    model: one of rsjax's ResNets with a stage of fewer than 32 channels (the
      CIFAR ResNets: ResNet-20, ResNet-110, ...), folded (``fold_batch_norm``)
      or not; ``model`` itself is not changed.
    g: samples per packed row: 1 (``model`` unchanged), 2 or 4 (any positive
      integer works; 2 and 4 turn 16 channels into 32 and 64).

  Returns:
    A :class:`PackedResNet` computing the same function up to rounding (module
    docstring), or ``model`` itself when ``g`` is 1 (packing off: any model).

  Raises:
    ValueError: ``g`` is not a positive integer, or the model has no narrow
      stage this transform can prove equal (named, with the reason).
  """
  if isinstance(g, bool) or not isinstance(g, int) or g < 1:
    raise ValueError(f"pack_narrow_stage: g must be a positive integer (1, 2, 4); got {g!r}")
  if g == 1:
    return model
  return PackedResNet(model, g, _packable(model))
