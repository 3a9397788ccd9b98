"""Batch norm folded into the convolutions before it, for inference.

In eval mode a BatchNorm after a convolution is an affine map per output
channel, ``y = (conv(x) - mean) * s + beta`` with ``s = gamma / sqrt(var + eps)``,
so it can be folded into the convolution: kernel ``* s`` and bias
``beta - mean * s`` (plus ``s`` times the convolution's own bias). The folded
network computes the same function with one memory pass fewer per convolution
(the BatchNorm's), which matters where inference is memory-bound (bf16 on a GPU).

It is the same function up to rounding, not the same computation: counts can
differ from the unfolded model's in the last bit of a logit. A certificate is
about the network as computed, so folding is an explicit choice
(``fold_batch_norm``), never done behind the user's back.

Pairs are found by name, as rsjax's ResNets build them (``rsjax.models._resnet``:
``conv1``/``bn1``, ``proj_conv``/``proj_bn``, ``stem_conv``/``stem_bn``): in a
module, an ``nnx.Conv`` attribute whose name contains ``conv`` and an
``nnx.BatchNorm`` attribute with ``bn`` in its place, applied to its output.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from flax import nnx

__all__ = ["fold_batch_norm"]


class Identity(nnx.Module):
  """``x -> x`` (the place of a folded BatchNorm)."""

  def __call__(self, x):
    return x


#: The attributes of an ``nnx.Conv`` that a rebuilt convolution keeps (constructor keywords).
_CONV_GEOMETRY = ("strides", "padding", "input_dilation", "kernel_dilation", "dtype", "param_dtype")


def conv_like(conv: nnx.Conv, in_features: int, out_features: int, **changes: Any) -> nnx.Conv:
  """A new ``nnx.Conv`` ``in_features -> out_features`` with ``conv``'s kernel size, strides,
  padding, dilations and dtypes, the keywords ``changes`` (``use_bias``,
  ``feature_group_count``, ``precision``, ...) and a zero kernel for the caller to overwrite
  (no random draw)."""
  geometry = {name: getattr(conv, name) for name in _CONV_GEOMETRY}
  zeros = nnx.initializers.zeros_init()
  return nnx.Conv(
    in_features, out_features, conv.kernel_size, **geometry, **changes, kernel_init=zeros,
    rngs=nnx.Rngs(0),
  )  # fmt: skip


def conv_bn_pairs(model: nnx.Module) -> list[tuple[nnx.Module, str, nnx.Conv, nnx.BatchNorm]]:
  """Each conv + BatchNorm pair of ``model``, found by name (this module's docstring):
  ``(module holding both, the convolution's attribute name, conv, bn)``."""
  pairs = []
  for _, module in nnx.iter_graph(model):
    if not isinstance(module, nnx.Module):
      continue
    for name, conv in list(vars(module).items()):
      if not isinstance(conv, nnx.Conv) or "conv" not in name:
        continue
      bn = getattr(module, name.replace("conv", "bn"), None)
      if isinstance(bn, nnx.BatchNorm):
        pairs.append((module, name, conv, bn))
  return pairs


def bn_scale_shift(bn: nnx.BatchNorm) -> tuple[Any, Any]:
  """``(s, beta - mean s)`` with ``s = gamma / sqrt(var + eps)``: the eval-mode BatchNorm as
  the per-channel affine map ``y = x s + shift``."""
  s = bn.scale.get_value() / jnp.sqrt(bn.var.get_value() + bn.epsilon)
  return s, bn.bias.get_value() - bn.mean.get_value() * s


def _folded_conv(conv: nnx.Conv, bn: nnx.BatchNorm) -> nnx.Conv:
  s, bias = bn_scale_shift(bn)
  kernel = conv.kernel.get_value()
  if conv.bias is not None:
    bias = bias + conv.bias.get_value() * s
  groups = conv.feature_group_count
  new = conv_like(
    conv, conv.in_features, conv.out_features, feature_group_count=groups, use_bias=True
  )
  new.kernel.set_value((kernel * s).astype(kernel.dtype))
  new.bias.set_value(bias.astype(kernel.dtype))
  return new


def fold_batch_norm(model: nnx.Module) -> tuple[nnx.Module, int]:
  """A copy of ``model`` with each conv + BatchNorm pair folded into one convolution.

  Args:
    model: an NNX model (``model`` itself is not changed).

  Returns:
    ``(folded copy, number of pairs folded)``.
  """
  model = nnx.clone(model)
  pairs = conv_bn_pairs(model)
  for module, name, conv, bn in pairs:
    setattr(module, name, _folded_conv(conv, bn))
    setattr(module, name.replace("conv", "bn"), Identity())
  return model, len(pairs)
