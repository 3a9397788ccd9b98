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

import jax.numpy as jnp
from flax import nnx

__all__ = ["fold_batch_norm"]


class Identity(nnx.Module):
  """``x -> x`` (the place of a folded BatchNorm)."""

  def __call__(self, x):
    return x


def _folded_conv(conv: nnx.Conv, bn: nnx.BatchNorm) -> nnx.Conv:
  get = lambda v: v.get_value()  # noqa: E731
  s = get(bn.scale) / jnp.sqrt(get(bn.var) + bn.epsilon)
  bias = get(bn.bias) - get(bn.mean) * s
  kernel = get(conv.kernel)
  if conv.bias is not None:
    bias = bias + get(conv.bias) * s
  new = nnx.Conv(
    conv.in_features,
    conv.out_features,
    conv.kernel_size,
    strides=conv.strides,
    padding=conv.padding,
    input_dilation=conv.input_dilation,
    kernel_dilation=conv.kernel_dilation,
    feature_group_count=conv.feature_group_count,
    use_bias=True,
    dtype=conv.dtype,
    param_dtype=conv.param_dtype,
    kernel_init=nnx.initializers.zeros_init(),  # overwritten: no random draw
    rngs=nnx.Rngs(0),
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
  folded = 0
  for _, module in nnx.iter_graph(model):
    if not isinstance(module, nnx.Module):
      continue
    for name, conv in list(vars(module).items()):
      if not isinstance(conv, nnx.Conv) or "conv" not in name:
        continue
      bn = getattr(module, name.replace("conv", "bn"), None)
      if isinstance(bn, nnx.BatchNorm):
        setattr(module, name, _folded_conv(conv, bn))
        setattr(module, name.replace("conv", "bn"), Identity())
        folded += 1
  return model, folded
