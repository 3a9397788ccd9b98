"""Shared layers: per-channel input normalization and PyTorch-like defaults.

Normalization is the model's first layer, as in Cohen et al.'s reference code
(``NormalizeLayer``): inputs stay in their natural [0, 1] scale, so noise is
added (and radii are measured) in pixel units, not in normalized units.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.typing import DTypeLike

__all__ = [
  "NORMALIZATION",
  "Normalize",
  "attention",
  "conv_init",
  "image_shape",
  "normalize_layer",
  "normalized",
  "resolve_normalization",
  "torch_default_init",
]

# Per-channel (mean, std) of each dataset, in [0, 1] pixel scale.
# CIFAR-10 values are the ones of Cohen et al.'s code (``code/datasets.py``).
# "digits": computed on all 1,797 scikit-learn digits after dividing by 16.
NORMALIZATION: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
  "cifar10": ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),
  "imagenet2012": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
  "mnist": ((0.1307,), (0.3081,)),
  "mnist5k": ((0.1307,), (0.3081,)),
  # MNIST's, over the 32x32 padded digits (784 of 1,024 pixels: mean x 0.766, E[x^2] x 0.766).
  "mnist5k32": ((0.1001,), (0.2752,)),
  "digits": ((0.3053,), (0.3760,)),
}
NORMALIZATION["imagenet"] = NORMALIZATION["imagenet2012"]
NORMALIZATION["cifar"] = NORMALIZATION["cifar10"]

#: A ``normalize`` argument: ``None``, a dataset name in ``NORMALIZATION`` or a
#: ``(mean, std)`` pair of per-channel sequences (or scalars).
NormalizeArg = str | tuple[float | Sequence[float], float | Sequence[float]] | None

# PyTorch BatchNorm2d defaults (momentum 0.1 there is 1 - 0.1 here).
BN_MOMENTUM = 0.9
BN_EPSILON = 1e-5


def _flat_sample(
  sampler: Callable[[jax.Array, tuple[int, ...], DTypeLike], jax.Array],
  key: jax.Array,
  shape: Sequence[int],
  dtype: DTypeLike,
) -> jax.Array:
  # Eager initialization compiles one sampling program per shape, and XLA
  # compiles a 4-d random normal several times slower than a 1-d one. Drawing
  # a flat vector of a power-of-two size (few distinct programs) and slicing
  # it keeps model construction fast; the values are i.i.d. all the same.
  n = math.prod(shape)
  size = max(1024, 1 << (n - 1).bit_length())
  return sampler(key, (size,), dtype)[:n].reshape(shape)


def conv_init(key: jax.Array, shape: Sequence[int], dtype: DTypeLike = jnp.float32) -> jax.Array:
  """He-normal on fan-out, ``N(0, 2 / (k_h k_w c_out))``: bearpaw / torchvision ResNets."""
  fan_out = math.prod(shape[:-2]) * shape[-1]
  std = math.sqrt(2.0 / fan_out)
  return _flat_sample(jax.random.normal, key, shape, dtype) * jnp.asarray(std, dtype)


def torch_default_init(
  key: jax.Array, shape: Sequence[int], dtype: DTypeLike = jnp.float32
) -> jax.Array:
  """PyTorch's default weight init for Linear/Conv: ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``."""
  fan_in = math.prod(shape[:-1])
  bound = 1.0 / math.sqrt(fan_in)
  return _flat_sample(
    lambda k, s, d: jax.random.uniform(k, s, d, minval=-bound, maxval=bound), key, shape, dtype
  )


def image_shape(input_shape: Sequence[int], model: str) -> tuple[int, int, int]:
  """``input_shape`` as ``(H, W, C)`` ints; ``ValueError`` naming ``model`` unless it is one."""
  shape = tuple(int(s) for s in input_shape)
  if len(shape) != 3 or min(shape) < 1:
    raise ValueError(f"{model} needs input_shape (H, W, C) with positive sizes; got {input_shape}.")
  return shape


def resolve_normalization(
  normalize: NormalizeArg, num_channels: int
) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
  """Turns a ``normalize`` argument into ``(mean, std)`` tuples or ``None``.

  Args:
    normalize: ``None`` (no normalization), a dataset name in ``NORMALIZATION``,
      or a ``(mean, std)`` pair of per-channel sequences (or scalars).
    num_channels: the number of input channels (last axis of the input).

  Returns:
    ``None`` or ``(mean, std)``, two tuples of floats of length 1 or
    ``num_channels``.
  """
  if normalize is None:
    return None
  raw_mean: float | Sequence[float]
  raw_std: float | Sequence[float]
  if isinstance(normalize, str):
    if normalize not in NORMALIZATION:
      raise ValueError(
        f"normalize={normalize!r} is not a known dataset; use one of "
        f"{sorted(NORMALIZATION)}, a (mean, std) pair, or None."
      )
    raw_mean, raw_std = NORMALIZATION[normalize]
  else:
    try:
      raw_mean, raw_std = normalize
    except (TypeError, ValueError):
      raise ValueError(
        f"normalize must be None, a dataset name or a (mean, std) pair; got {normalize!r}."
      ) from None
  mean = tuple(float(m) for m in (raw_mean if isinstance(raw_mean, Sequence) else (raw_mean,)))
  std = tuple(float(s) for s in (raw_std if isinstance(raw_std, Sequence) else (raw_std,)))
  for name, v in (("mean", mean), ("std", std)):
    if len(v) not in (1, num_channels):
      raise ValueError(
        f"normalize {name} has {len(v)} values but the input has {num_channels} channels."
      )
  if any(s <= 0 for s in std):
    raise ValueError(f"normalize std must be positive; got {std}.")
  return mean, std


class Normalize(nnx.Module):
  """``(x - mean) / std`` over the last (channel) axis; no trainable state.

  The constants are static (part of the graph definition, not of the
  parameters), so they are never trained, checkpointed or overwritten.
  """

  def __init__(self, mean: Sequence[float], std: Sequence[float]):
    self.mean = tuple(float(m) for m in mean)
    self.std = tuple(float(s) for s in std)

  def __call__(self, x: jax.Array) -> jax.Array:
    """Normalizes ``x`` of shape ``[b, ..., C]``; keeps its dtype."""
    mean = jnp.asarray(self.mean, dtype=x.dtype)
    std = jnp.asarray(self.std, dtype=x.dtype)
    return (x - mean) / std


def normalize_layer(normalize: NormalizeArg, num_channels: int) -> Normalize | None:
  """The :class:`Normalize` layer of ``normalize`` (:func:`resolve_normalization`), or None."""
  norm = resolve_normalization(normalize, num_channels)
  return Normalize(*norm) if norm is not None else None


def normalized(model: Any, x: jax.Array) -> jax.Array:
  """``x`` through ``model.normalize`` (a :class:`Normalize` layer or None)."""
  return x if model.normalize is None else model.normalize(x)


def attention(q: jax.Array, k: jax.Array, v: jax.Array, bias: jax.Array | None = None) -> jax.Array:
  """Multi-head ``softmax(q k^T / sqrt(d) + bias) v`` with the softmax in float32.

  Args:
    q, k, v: ``[b, n, heads, d]`` queries, keys and values.
    bias: optional logit bias broadcasting to ``[b, heads, n, n]``.

  Returns:
    ``[b, n, heads, d]``.
  """
  logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
  if bias is not None:
    logits = logits + bias.astype(logits.dtype)
  weights = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(v.dtype)
  return jnp.einsum("bhqk,bkhd->bqhd", weights, v)
