"""Core ATen's network operators in JAX: convolution, matrix products, the eval-mode norms and
pooling (``RULES`` of ``rsjax.models._aten`` files them under their operators' names).

Arguments come in PyTorch's layout (NCHW images, OIHW kernels, ``[out, in]`` weights); the norms
return PyTorch's tuples (the statistics entries are None: only the output is ever read).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

__all__ = [
  "adaptive_avg_pool",
  "addmm",
  "avg_pool",
  "batch_norm_no_training",
  "convolution",
  "group_norm",
  "layer_norm",
  "matmul",
  "max_pool",
]


def _per_channel(v: jax.Array, ndim: int) -> jax.Array:
  """A ``[C]`` vector broadcast along axis 1 of an ``ndim``-dim ``[N, C, ...]`` array."""
  return v.reshape((1, -1) + (1,) * (ndim - 2))


# -- convolution, matrix products ------------------------------------------------------------


def convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups):
  """``aten.convolution``: any number of spatial dims, NC... x OI... (not transposed)."""
  if transposed:
    raise ValueError("a transposed convolution (ConvTranspose) is not supported")
  n = x.ndim - 2
  spatial = "DHW"[-n:] if n <= 3 else None
  if spatial is None:
    raise ValueError(f"a convolution over {n} spatial dims is not supported (1 to 3)")
  numbers = ("NC" + spatial, "OI" + spatial, "NC" + spatial)
  y = lax.conv_general_dilated(
    x,
    w.astype(x.dtype),
    window_strides=tuple(stride),
    padding=[(p, p) for p in padding],
    rhs_dilation=tuple(dilation),
    dimension_numbers=numbers,
    feature_group_count=int(groups),
  )
  return y if b is None else y + _per_channel(b.astype(y.dtype), y.ndim)


def addmm(bias, a, b, *, beta=1, alpha=1):
  """``beta bias + alpha (a @ b)``."""
  out = a @ b.astype(a.dtype)
  out = out if alpha == 1 else alpha * out
  return out + (bias if beta == 1 else beta * bias).astype(out.dtype)


def matmul(a, b):
  """``a @ b`` (``mm``, ``bmm``) in ``a``'s dtype."""
  return a @ b.astype(a.dtype)


# -- normalization -----------------------------------------------------------------------------


def batch_norm_no_training(x, weight, bias, mean, var, momentum, eps):
  """``aten._native_batch_norm_legit_no_training``: the running statistics, one scale and
  shift per channel."""
  del momentum
  scale = lax.rsqrt(var.astype(jnp.float32) + eps)
  if weight is not None:
    scale = scale * weight
  shift = -mean * scale if bias is None else bias - mean * scale
  y = x * _per_channel(scale.astype(x.dtype), x.ndim) + _per_channel(shift.astype(x.dtype), x.ndim)
  return y, None, None


def _standardized(x: jax.Array, axes: tuple[int, ...], eps: float) -> jax.Array:
  """``(x - mean) / sqrt(var + eps)`` over ``axes`` (biased variance), in float32."""
  x32 = x.astype(jnp.float32)
  mean = jnp.mean(x32, axis=axes, keepdims=True)
  var = jnp.mean(jnp.square(x32 - mean), axis=axes, keepdims=True)
  return (x32 - mean) * lax.rsqrt(var + eps)


def group_norm(x, weight, bias, n, c, hw, group, eps):
  """``aten.native_group_norm`` over ``[N, C, ...]``: statistics per sample and group."""
  del n, hw
  shape = x.shape
  g = x.reshape(shape[0], int(group), -1)
  y = _standardized(g, (2,), eps).reshape(shape)
  if weight is not None:
    y = y * _per_channel(weight, len(shape))
  if bias is not None:
    y = y + _per_channel(bias, len(shape))
  return y.astype(x.dtype), None, None


def layer_norm(x, normalized_shape, weight, bias, eps):
  """``aten.native_layer_norm`` over the last ``len(normalized_shape)`` axes."""
  axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
  y = _standardized(x, axes, eps)
  if weight is not None:
    y = y * weight
  if bias is not None:
    y = y + bias
  return y.astype(x.dtype), None, None


# -- pooling -----------------------------------------------------------------------------------


def _pool_padding(sizes, kernel, stride, padding, ceil_mode):
  """``[(lo, hi)]`` of each spatial axis of sizes ``sizes``: PyTorch's symmetric padding, and
  with ``ceil_mode`` the extra right padding of a last window that starts inside the input (or
  its left padding)."""
  pads = []
  for size, k, s, p in zip(sizes, kernel, stride, padding, strict=True):
    hi = p
    if ceil_mode:
      out = -(-(size + 2 * p - k) // s) + 1
      if (out - 1) * s >= size + p:
        out -= 1
      hi = max(p, (out - 1) * s + k - size - p)
    pads.append((p, hi))
  return pads


def _pool_args(x, kernel, stride, padding, ceil_mode, channels_last):
  """``(spatial sizes, stride, padding, window, strides, pads)`` of a pooling of ``x``: its
  spatial axes are the last ``len(kernel)`` (PyTorch's layout) or the ones before the last
  (``channels_last``: ``[N, H, W, C]``)."""
  n, trail = len(kernel), int(channels_last)
  lead = x.ndim - n - trail
  sizes = x.shape[lead : lead + n]
  stride = tuple(stride) if stride else tuple(kernel)
  padding = tuple(padding) * (n if len(padding) == 1 else 1)
  ones = (1,) * lead, (1,) * trail
  window = ones[0] + tuple(kernel) + ones[1]
  strides = ones[0] + stride + ones[1]
  spatial = _pool_padding(sizes, kernel, stride, padding, ceil_mode)
  pads = [(0, 0)] * lead + spatial + [(0, 0)] * trail
  return sizes, stride, padding, window, strides, pads


def max_pool(
  x, kernel, stride=(), padding=(0,), dilation=(1,), ceil_mode=False, *, channels_last=False
):
  """``aten.max_pool2d_with_indices`` (and 1d/3d): the maxima (the indices are not kept).
  ``channels_last``: ``x`` is ``[N, H, W, C]`` (rsjax's own use, never PyTorch's)."""
  if any(d != 1 for d in dilation):
    raise ValueError("max pooling with dilation is not supported")
  _, _, _, window, strides, pads = _pool_args(x, kernel, stride, padding, ceil_mode, channels_last)
  return lax.reduce_window(x, -jnp.inf, lax.max, window, strides, pads), None


def avg_pool(
  x,
  kernel,
  stride=(),
  padding=(0,),
  ceil_mode=False,
  count_include_pad=True,
  divisor_override=None,
  *,
  channels_last=False,
):
  """``aten.avg_pool2d`` (and 1d/3d), with PyTorch's divisor rules (``channels_last``: as in
  :func:`max_pool`)."""
  args = _pool_args(x, kernel, stride, padding, ceil_mode, channels_last)
  sizes, stride, padding, window, strides, pads = args
  total = lax.reduce_window(x, 0.0, lax.add, window, strides, pads)
  if divisor_override:
    return total / divisor_override
  spatial = _pool_padding(sizes, kernel, stride, padding, ceil_mode)
  ones = jnp.ones(sizes, x.dtype)
  if count_include_pad:  # padding counts, the ceil_mode overhang does not
    ones = jnp.pad(ones, [(p, p) for p in padding], constant_values=1)
    spatial = [(0, hi - p) for (_, hi), p in zip(spatial, padding, strict=True)]
  count = lax.reduce_window(ones, 0.0, lax.add, tuple(kernel), stride, spatial)
  return total / (count[..., None] if channels_last else count)


def adaptive_avg_pool(x, output_size):
  """``aten._adaptive_avg_pool2d`` where each output size divides its input size."""
  n = len(output_size)
  shape = list(x.shape[:-n])
  for size, out in zip(x.shape[-n:], output_size, strict=True):
    if size % out:
      raise ValueError(f"adaptive average pooling of {size} to {out} (not a divisor)")
    shape += [out, size // out]
  return x.reshape(shape).mean(axis=tuple(range(x.ndim - n + 1, x.ndim + n, 2)))
