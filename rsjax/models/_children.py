"""Children of a trained model, the changed models ``rsjax recertify`` certifies from their
parent's certificate: weight-only int8 quantization (per output channel, symmetric),
magnitude pruning to a sparsity, bfloat16 rounding of the weights, and batch norm folded
into the convolutions' weights in the same architecture. Each returns a new
model (the given one is not changed) with float32 weights holding the changed values, so
it is saved, loaded and fingerprinted as any model directory (:func:`save_child`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rsjax.models._fold import bn_scale_shift, conv_bn_pairs

__all__ = [
  "bfloat16_weights",
  "fold_batch_norm_weights",
  "prune_magnitude",
  "quantize_int8",
  "save_child",
]


def _map_kernels(model: Any, fn: Callable[[jax.Array], jax.Array], *, kernels_only: bool) -> Any:
  """A copy of ``model`` with ``fn`` applied to each floating parameter (with
  ``kernels_only``: the weight matrices and convolution kernels, ``ndim >= 2``)."""
  out = nnx.clone(model)
  params = nnx.state(out, nnx.Param)

  def one(p: Any) -> Any:
    if not jnp.issubdtype(p.dtype, jnp.floating) or (kernels_only and p.ndim < 2):
      return p
    return fn(p).astype(p.dtype)

  nnx.update(out, jax.tree.map(one, params))
  return out


def quantize_int8(model: Any) -> Any:
  """Weight-only int8 quantization, per output channel, symmetric: each kernel ``w`` (last
  axis: output channels) becomes ``round(w / s) s`` with ``s = max|w| / 127`` of its
  channel, the integers clipped to ``[-127, 127]``; biases and normalizations stay float32.
  """

  def q(w: jax.Array) -> jax.Array:
    axes = tuple(range(w.ndim - 1))
    scale = jnp.max(jnp.abs(w), axis=axes, keepdims=True) / 127.0
    scale = jnp.where(scale > 0, scale, 1.0)
    return jnp.clip(jnp.round(w / scale), -127, 127) * scale

  return _map_kernels(model, q, kernels_only=True)


def prune_magnitude(model: Any, sparsity: float) -> Any:
  """Magnitude pruning: in each kernel, the ``sparsity`` fraction of weights of smallest
  magnitude set to 0 (ties at the threshold pruned too); biases kept.

  Raises:
    ValueError: ``sparsity`` outside ``[0, 1)``.
  """
  if not 0.0 <= float(sparsity) < 1.0:
    raise ValueError(f"sparsity must be in [0, 1), got {sparsity}")

  def prune(w: jax.Array) -> jax.Array:
    k = int(np.floor(float(sparsity) * w.size))
    if k == 0:
      return w
    threshold = jnp.sort(jnp.abs(w).reshape(-1))[k - 1]
    return jnp.where(jnp.abs(w) <= threshold, 0.0, w)

  return _map_kernels(model, prune, kernels_only=True)


def bfloat16_weights(model: Any) -> Any:
  """Every floating parameter rounded to bfloat16 (kept in float32 storage)."""
  return _map_kernels(model, lambda w: w.astype(jnp.bfloat16).astype(jnp.float32),
                      kernels_only=False)  # fmt: skip


def fold_batch_norm_weights(model: Any) -> tuple[Any, int]:
  """Each conv + BatchNorm pair folded as ``rsjax.models.fold_batch_norm`` folds it, kept in
  the same architecture so that it saves as a model directory: the kernel scaled by
  ``s = gamma / sqrt(var + eps)`` per output channel, the BatchNorm left as the shift
  ``beta - mean s`` (plus ``s`` times the convolution's bias, then zeroed) with scale 1,
  mean 0 and variance ``1 - eps`` (one without a scale or a shift stays). The same function
  up to rounding, other weights.

  Returns:
    ``(folded copy, number of pairs folded)``; ``model`` is not changed.
  """
  out = nnx.clone(model)
  return out, sum(_fold_pair(conv, bn) for _, _, conv, bn in conv_bn_pairs(out))


def _fold_pair(conv: nnx.Conv, bn: nnx.BatchNorm) -> bool:
  """Folds ``bn`` into ``conv``'s kernel in place; False (nothing changed) where the
  BatchNorm has no scale or no shift to hold the result."""
  scale, beta = bn.scale, bn.bias
  if scale is None or beta is None:
    return False
  s, shift = bn_scale_shift(bn)
  if conv.bias is not None:
    bias = conv.bias
    shift = shift + bias.get_value() * s
    bias.set_value(jnp.zeros_like(bias.get_value()))
  conv.kernel.set_value(conv.kernel.get_value() * s)
  scale.set_value(jnp.ones_like(s))
  bn.mean.set_value(jnp.zeros_like(s))
  bn.var.set_value(jnp.full_like(s, 1.0 - bn.epsilon))
  beta.set_value(shift)
  return True


def save_child(
  directory: str | os.PathLike, child: Any, parent_config: Mapping, transform: Mapping
) -> None:
  """Writes ``child`` as a model directory with its parent's configuration and what it
  derives from (``config["derived_from"]``: the transform and its settings)."""
  from rsjax.models._directory import save_model

  config = {**dict(parent_config), "derived_from": dict(transform)}
  # At its parent's last epoch: a child is no unfinished training.
  step = (config.get("train") or {}).get("epochs")
  save_model(directory, child, config, step=step if isinstance(step, int) else 0)
