"""Channels-last execution of a PyTorch graph: the same numbers, without XLA:CPU's transposes.

A PyTorch graph computes NCHW; XLA's CPU backend computes a convolution channels-last, and
around an NCHW one it transposes the input, the kernel and the output (passes that cost as much
as the convolutions of a small network; ``rsjax.app.bench.layout``). So ``_torch_graph`` carries
a 4-D image value as :class:`ChannelsLast`: its NCHW value stored ``[N, H, W, C]``. The rules of
``LAYOUT_RULES`` take such values (convolution, batch and group norm, element-wise operators,
pooling, spatial reductions, concatenation, sizes) and return them; any other operator gets its
arguments back in PyTorch's layout (:func:`own`) and runs its ``RULES`` entry. The rsjax input,
NHWC already, enters as a :class:`ChannelsLast` with no transpose at all.

A rule here returns ``NotImplemented`` where its arguments are not ones it handles (the caller
then falls back to PyTorch's layout): the result is the same function either way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from rsjax.models import _aten_nn as nn
from rsjax.models._aten import RULES

__all__ = ["ChannelsLast", "LAYOUT_RULES", "has_layout", "own"]

#: A logical NCHW axis -> its axis in the stored ``[N, H, W, C]``.
_STORED = (0, 3, 1, 2)


@dataclasses.dataclass(frozen=True)
class ChannelsLast:
  """A 4-D NCHW value stored channels-last: ``stored`` is ``[N, H, W, C]``."""

  stored: jax.Array

  @property
  def shape(self) -> tuple[int, ...]:
    """The NCHW shape (PyTorch's)."""
    n, h, w, c = self.stored.shape
    return (n, c, h, w)


def own(v: Any) -> Any:
  """``v`` in PyTorch's layout (a :class:`ChannelsLast` transposed back; lists recursively)."""
  if isinstance(v, ChannelsLast):
    return jnp.transpose(v.stored, (0, 3, 1, 2))
  if isinstance(v, (list, tuple)):
    return type(v)(own(a) for a in v)
  return v


def has_layout(v: Any) -> bool:
  """Whether ``v`` is or holds a :class:`ChannelsLast`."""
  if isinstance(v, ChannelsLast):
    return True
  return isinstance(v, (list, tuple)) and any(has_layout(a) for a in v)


def _stored(v: Any) -> Any:
  """A 4-D value as stored channels-last, a scalar as it is; None for anything else."""
  if isinstance(v, ChannelsLast):
    return v.stored
  if isinstance(v, (bool, int, float)) or (hasattr(v, "ndim") and v.ndim == 0):
    return v
  if hasattr(v, "ndim") and v.ndim == 4:
    return jnp.transpose(v, (0, 2, 3, 1))
  return None


def convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups):
  """A 2-D convolution computed NHWC x HWIO (its input need not be channels-last)."""
  del output_padding
  if transposed or w.ndim != 4:
    return NotImplemented
  xs = _stored(x)
  y = lax.conv_general_dilated(
    xs,
    jnp.transpose(w, (2, 3, 1, 0)).astype(xs.dtype),
    window_strides=tuple(stride),
    padding=[(p, p) for p in padding],
    rhs_dilation=tuple(dilation),
    dimension_numbers=("NHWC", "HWIO", "NHWC"),
    feature_group_count=int(groups),
  )
  return ChannelsLast(y if b is None else y + b.astype(y.dtype))


def batch_norm(x, weight, bias, mean, var, momentum, eps):
  if not isinstance(x, ChannelsLast):
    return NotImplemented
  flat = nn.batch_norm_no_training(x.stored.reshape(-1, x.shape[1]), weight, bias, mean, var,
                                   momentum, eps)[0]  # fmt: skip
  return ChannelsLast(flat.reshape(x.stored.shape)), None, None


def group_norm(x, weight, bias, n, c, hw, group, eps):
  """Statistics per sample and group of channels, over ``[N, H, W, G, C / G]``."""
  del n, c, hw
  if not isinstance(x, ChannelsLast):
    return NotImplemented
  s = x.stored
  g = s.reshape(*s.shape[:3], int(group), -1).astype(jnp.float32)
  mean = jnp.mean(g, axis=(1, 2, 4), keepdims=True)
  var = jnp.mean(jnp.square(g - mean), axis=(1, 2, 4), keepdims=True)
  y = ((g - mean) * lax.rsqrt(var + eps)).reshape(s.shape)
  y = y if weight is None else y * weight
  y = y if bias is None else y + bias
  return ChannelsLast(y.astype(s.dtype)), None, None


def _elementwise(rule: Callable) -> Callable:
  """An element-wise rule on channels-last values: each 4-D argument stored channels-last,
  scalars as they are; anything else (a broadcast of fewer axes) is not handled here."""

  def layout_rule(*args, **kwargs):
    stored = [_stored(a) if hasattr(a, "ndim") or isinstance(a, ChannelsLast) else a for a in args]
    if any(s is None for s in stored):
      return NotImplemented
    return ChannelsLast(rule(*stored, **kwargs))

  return layout_rule


def _pool(rule: Callable) -> Callable:
  def layout_rule(x, kernel, *args, **kwargs):
    if not isinstance(x, ChannelsLast) or len(kernel) != 2:
      return NotImplemented
    out = rule(x.stored, kernel, *args, channels_last=True, **kwargs)
    return (ChannelsLast(out[0]), None) if isinstance(out, tuple) else ChannelsLast(out)

  return layout_rule


def adaptive_avg_pool(x, output_size):
  if not isinstance(x, ChannelsLast):
    return NotImplemented
  s = x.stored
  (oh, ow), (h, w) = output_size, s.shape[1:3]
  if h % oh or w % ow:
    return NotImplemented
  return ChannelsLast(s.reshape(s.shape[0], oh, h // oh, ow, w // ow, -1).mean(axis=(2, 4)))


def _reduction(fn: Callable) -> Callable:
  """A reduction over NCHW axes, computed on the stored axes; the result in PyTorch's order
  (channels-last again where it keeps all four axes)."""

  def layout_rule(x, dims=None, keepdim=False, *, dtype=None):
    if not isinstance(x, ChannelsLast) or dtype is not None:
      return NotImplemented
    dims = range(4) if not dims else [dims] if isinstance(dims, int) else dims
    logical = sorted({d % 4 for d in dims})
    y = fn(x.stored, axis=tuple(_STORED[d] for d in logical), keepdims=keepdim)
    if keepdim:
      return ChannelsLast(y)
    kept = [d for d in (0, 2, 3, 1) if d not in logical]  # NCHW axes in stored order
    return jnp.transpose(y, sorted(range(len(kept)), key=lambda i: kept[i]))

  return layout_rule


def cat(xs, dim=0):
  stored = [_stored(x) for x in xs]
  if any(s is None or getattr(s, "ndim", 0) != 4 for s in stored):
    return NotImplemented
  return ChannelsLast(jnp.concatenate(stored, axis=_STORED[dim % 4]))


def _passing(v, *_ignored, **_kwargs):
  return v


_UNARY = (
  "relu sigmoid tanh exp log sqrt rsqrt neg abs erf sin cos reciprocal floor ceil gelu hardtanh "
  "leaky_relu clamp"
).split()
_BINARY = ("add", "sub", "rsub", "mul", "div", "maximum", "minimum")


def _layout_rules() -> dict[str, Callable]:
  rules: dict[str, Callable] = {
    "aten.convolution.default": convolution,
    "aten._native_batch_norm_legit_no_training.default": batch_norm,
    "aten.native_group_norm.default": group_norm,
    "aten.max_pool2d_with_indices.default": _pool(nn.max_pool),
    "aten.avg_pool2d.default": _pool(nn.avg_pool),
    "aten._adaptive_avg_pool2d.default": adaptive_avg_pool,
    "aten.mean.dim": _reduction(jnp.mean),
    "aten.sum.dim_IntList": _reduction(jnp.sum),
    "aten.amax.default": _reduction(jnp.max),
    "aten.amin.default": _reduction(jnp.min),
    "aten.cat.default": cat,
    "aten.sym_size.int": lambda x, dim: x.shape[dim],
    "operator.getitem": lambda seq, i: seq[i],
    "aten.clone.default": _passing,
    "aten.alias.default": _passing,
    "aten.detach.default": _passing,
  }
  for name in _UNARY:
    rules[f"aten.{name}.default"] = _elementwise(RULES[f"aten.{name}.default"])
  for name in _BINARY:
    for form in ("Tensor", "Scalar"):
      op = f"aten.{name}.{form}"
      if op in RULES:
        rules[op] = _elementwise(RULES[op])
  return rules


#: The operators run on :class:`ChannelsLast` values, each returning them (or
#: ``NotImplemented``: PyTorch's layout then, through ``RULES``).
LAYOUT_RULES: dict[str, Callable[..., Any]] = _layout_rules()
