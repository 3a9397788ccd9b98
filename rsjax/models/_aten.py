"""Core ATen operators in JAX: the rules that run a ``torch.export`` graph (``_torch_graph``).

``RULES`` maps an operator's name as ``torch.export`` writes it (``"aten.convolution.default"``)
to a function of the node's arguments, already evaluated: arrays where the node takes
tensors, Python numbers and lists where it takes scalars and sizes, in PyTorch's layout
(NCHW images, OIHW kernels, ``[out, in]`` linear weights). Each rule computes what its
operator computes in eval mode, up to float rounding; a rule returns a tuple where the
operator does (batch, group and layer norm, ``max_pool2d_with_indices``: only the first
entry is ever read, the others are None). ``tests/test_torch_module_rules.py`` checks every
rule against PyTorch's operator.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from rsjax.models._aten_nn import (
  adaptive_avg_pool,
  addmm,
  avg_pool,
  batch_norm_no_training,
  convolution,
  group_norm,
  layer_norm,
  matmul,
  max_pool,
)

__all__ = ["RULES", "SYMBOLIC", "dtype_of"]

#: PyTorch dtype names (``str(torch.float32)`` without ``torch.``) -> JAX dtypes.
_DTYPES = {
  "float32": jnp.float32,
  "float": jnp.float32,
  "float16": jnp.float16,
  "bfloat16": jnp.bfloat16,
  "float64": jnp.float32,  # JAX without x64: float32 (a cast to float64 keeps float32)
  "int64": jnp.int32,
  "long": jnp.int32,
  "int32": jnp.int32,
  "int16": jnp.int16,
  "int8": jnp.int8,
  "uint8": jnp.uint8,
  "bool": jnp.bool_,
}


def dtype_of(name: str | None) -> Any:
  """The JAX dtype of a PyTorch dtype name (``"float32"``), or None for None."""
  if name is None:
    return None
  if name not in _DTYPES:
    raise ValueError(f"dtype {name!r} is not supported (known: {', '.join(sorted(_DTYPES))})")
  return _DTYPES[name]


def _dim(x: jax.Array, d: int) -> int:
  return d % max(x.ndim, 1)


def _dims(x: jax.Array, dims: int | Sequence[int] | None) -> tuple[int, ...]:
  """Axes as non-negative ints; None or ``[]`` is every axis (PyTorch's reductions)."""
  if dims is None or (not isinstance(dims, int) and len(dims) == 0):
    return tuple(range(x.ndim))
  dims = [dims] if isinstance(dims, int) else dims
  return tuple(_dim(x, d) for d in dims)


# -- shapes ------------------------------------------------------------------------------------


def expand(x, size, *, implicit=False):
  """``aten.expand``: ``-1`` keeps a size; leading new axes are allowed."""
  del implicit
  lead = len(size) - x.ndim
  shape = [x.shape[i - lead] if s == -1 else s for i, s in enumerate(size)]
  return jnp.broadcast_to(x, shape)


def slice_(x, dim=0, start=None, end=None, step=1):
  """``aten.slice.Tensor``: PyTorch clamps out-of-range bounds."""
  index = [slice(None)] * x.ndim
  index[_dim(x, dim)] = slice(start, end, step)
  return x[tuple(index)]


def select(x, dim, index):
  return jnp.take(x, index, axis=_dim(x, dim))


def squeeze(x, dims=None):
  dims = _dims(x, dims)
  return jnp.squeeze(x, tuple(d for d in dims if x.shape[d] == 1))


def split_with_sizes(x, sizes, dim=0):
  cuts = [int(c) for c in jnp.cumsum(jnp.asarray(sizes))[:-1]]
  return tuple(jnp.split(x, cuts, axis=_dim(x, dim)))


def split(x, size, dim=0):
  d = _dim(x, dim)
  return tuple(jnp.split(x, list(range(size, x.shape[d], size)), axis=d))


def constant_pad(x, pad, value=0.0):
  """``aten.constant_pad_nd``: ``pad`` pairs from the last axis backwards (negative: crop)."""
  pairs = [(0, 0, 0)] * x.ndim
  for i in range(len(pad) // 2):
    pairs[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1], 0)
  return lax.pad(x, jnp.asarray(value, x.dtype), pairs)


# -- reductions, softmax ------------------------------------------------------------------------


def _reduce(fn: Callable) -> Callable:
  def rule(x, dims=None, keepdim=False, *, dtype=None):
    y = fn(x, axis=_dims(x, dims), keepdims=keepdim)
    return y if dtype is None else y.astype(dtype_of(dtype))

  return rule


def var(x, dims=None, *, correction=1, keepdim=False):
  """``aten.var.correction``: ``sum((x - mean)^2) / (n - correction)``."""
  axes = _dims(x, dims)
  count = math.prod(x.shape[a] for a in axes)
  mean = jnp.mean(x, axis=axes, keepdims=True)
  total = jnp.sum(jnp.square(x - mean), axis=axes, keepdims=keepdim)
  return total / max(count - (1 if correction is None else correction), 0)


def softmax(x, dim, half_to_float=False):
  del half_to_float
  return jax.nn.softmax(x, axis=_dim(x, dim))


def log_softmax(x, dim, half_to_float=False):
  del half_to_float
  return jax.nn.log_softmax(x, axis=_dim(x, dim))


# -- element-wise --------------------------------------------------------------------------------


def _with_alpha(fn: Callable) -> Callable:
  def rule(a, b, *, alpha=1):
    return fn(a, b if alpha == 1 else alpha * b)

  return rule


def div_mode(a, b, *, rounding_mode=None):
  if rounding_mode is None:
    return a / b
  if rounding_mode == "floor":
    return jnp.floor_divide(a, b)
  return jnp.trunc(a / b) if jnp.issubdtype(jnp.result_type(a), jnp.floating) else a // b


def gelu(x, *, approximate="none"):
  return jax.nn.gelu(x, approximate=approximate == "tanh")


def hardtanh(x, min_val=-1.0, max_val=1.0):
  return jnp.clip(x, min_val, max_val)


def leaky_relu(x, negative_slope=0.01):
  return jnp.where(x > 0, x, x * negative_slope)


def clamp(x, min=None, max=None):  # noqa: A002 - PyTorch's argument names
  return jnp.clip(x, min, max)


def where(cond, a, b):
  return jnp.where(cond, a, b)


def to_copy(x, *, dtype=None, **_ignored):
  """``aten._to_copy``: a cast (device, layout and memory format do not apply)."""
  return x if dtype is None else x.astype(dtype_of(dtype))


def full(size, value, *, dtype=None, **_ignored):
  return jnp.full(tuple(size), value, dtype=dtype_of(dtype) or _scalar_dtype(value))


def full_like(x, value, *, dtype=None, **_ignored):
  return jnp.full(x.shape, value, dtype=dtype_of(dtype) or x.dtype)


def arange(start, end=None, step=1, *, dtype=None, **_ignored):
  if end is None:
    start, end = 0, start
  return jnp.arange(start, end, step, dtype=dtype_of(dtype))


def scalar_tensor(value, *, dtype=None, **_ignored):
  return jnp.asarray(value, dtype=dtype_of(dtype) or jnp.float32)


def _scalar_dtype(value) -> Any:
  if isinstance(value, bool):
    return jnp.bool_
  return jnp.int32 if isinstance(value, int) else jnp.float32


def _unary(fn: Callable) -> Callable:
  return lambda x: fn(x)


def _identity(x, *_ignored, **_kwargs):
  return x


def _elementwise() -> dict[str, Callable]:
  """The element-wise operators, their ``.Tensor`` and ``.Scalar`` forms alike."""
  binary = {
    "add": _with_alpha(jnp.add),
    "sub": _with_alpha(jnp.subtract),
    "rsub": _with_alpha(lambda a, b: b - a),
    "mul": jnp.multiply,
    "div": jnp.divide,
    "pow": jnp.power,
    "maximum": jnp.maximum,
    "minimum": jnp.minimum,
    "eq": jnp.equal,
    "ne": jnp.not_equal,
    "lt": jnp.less,
    "le": jnp.less_equal,
    "gt": jnp.greater,
    "ge": jnp.greater_equal,
    "logical_and": jnp.logical_and,
    "logical_or": jnp.logical_or,
  }
  rules = {}
  for name, fn in binary.items():
    for form in ("Tensor", "Scalar", "Tensor_Scalar"):
      rules[f"aten.{name}.{form}"] = fn
  rules["aten.maximum.default"] = jnp.maximum
  rules["aten.minimum.default"] = jnp.minimum
  unary = {
    "relu": jax.nn.relu,
    "sigmoid": jax.nn.sigmoid,
    "tanh": jnp.tanh,
    "exp": jnp.exp,
    "log": jnp.log,
    "sqrt": jnp.sqrt,
    "rsqrt": lax.rsqrt,
    "neg": jnp.negative,
    "abs": jnp.abs,
    "erf": jax.scipy.special.erf,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "reciprocal": jnp.reciprocal,
    "logical_not": jnp.logical_not,
    "floor": jnp.floor,
    "ceil": jnp.ceil,
  }
  rules |= {f"aten.{name}.default": _unary(fn) for name, fn in unary.items()}
  return rules


#: The Core ATen operators a graph may use, each a rule of the arguments PyTorch gives it.
RULES: dict[str, Callable[..., Any]] = {
  **_elementwise(),
  "aten.convolution.default": convolution,
  "aten.addmm.default": addmm,
  "aten.mm.default": matmul,
  "aten.bmm.default": matmul,
  "aten._native_batch_norm_legit_no_training.default": batch_norm_no_training,
  "aten.native_group_norm.default": group_norm,
  "aten.native_layer_norm.default": layer_norm,
  "aten.gelu.default": gelu,
  "aten.hardtanh.default": hardtanh,
  "aten.leaky_relu.default": leaky_relu,
  "aten.clamp.default": clamp,
  "aten.div.Tensor_mode": div_mode,
  "aten.where.self": where,
  "aten.max_pool2d_with_indices.default": max_pool,
  "aten.max_pool3d_with_indices.default": max_pool,
  "aten.avg_pool1d.default": avg_pool,
  "aten.avg_pool2d.default": avg_pool,
  "aten.avg_pool3d.default": avg_pool,
  "aten._adaptive_avg_pool2d.default": adaptive_avg_pool,
  "aten.view.default": jnp.reshape,
  "aten._unsafe_view.default": jnp.reshape,
  "aten.reshape.default": jnp.reshape,
  "aten.permute.default": jnp.transpose,
  "aten.expand.default": expand,
  "aten.cat.default": lambda xs, dim=0: jnp.concatenate(xs, axis=_dim(xs[0], dim)),
  "aten.slice.Tensor": slice_,
  "aten.select.int": select,
  "aten.squeeze.dims": squeeze,
  "aten.squeeze.dim": squeeze,
  "aten.unsqueeze.default": lambda x, dim: jnp.expand_dims(x, dim % (x.ndim + 1)),
  "aten.split_with_sizes.default": split_with_sizes,
  "aten.split.Tensor": split,
  "aten.constant_pad_nd.default": constant_pad,
  "aten.clone.default": _identity,
  "aten.alias.default": _identity,
  "aten.lift_fresh_copy.default": _identity,
  "aten.detach.default": _identity,
  "aten._to_copy.default": to_copy,
  "aten.full.default": full,
  "aten.full_like.default": full_like,
  "aten.arange.start_step": arange,
  "aten.arange.default": arange,
  "aten.scalar_tensor.default": scalar_tensor,
  "aten.mean.dim": _reduce(jnp.mean),
  "aten.sum.dim_IntList": _reduce(jnp.sum),
  "aten.amax.default": _reduce(jnp.max),
  "aten.amin.default": _reduce(jnp.min),
  "aten.any.dim": _reduce(jnp.any),
  "aten.any.dims": _reduce(jnp.any),
  "aten.all.dim": _reduce(jnp.all),
  "aten.var.correction": var,
  "aten._softmax.default": softmax,
  "aten._log_softmax.default": log_softmax,
}

#: Operators on sizes (``SymInt``) of a graph exported with a dynamic batch: evaluated in
#: Python at trace time, where every shape is known.
SYMBOLIC: dict[str, Callable[..., Any]] = {
  "aten.sym_size.int": lambda x, dim: x.shape[dim],
  "operator.getitem": operator.getitem,
  "operator.mul": operator.mul,
  "operator.add": operator.add,
  "operator.sub": operator.sub,
  "operator.floordiv": operator.floordiv,
  "operator.truediv": operator.truediv,
  "operator.neg": operator.neg,
  "_operator.getitem": operator.getitem,
  "_operator.mul": operator.mul,
  "_operator.add": operator.add,
  "_operator.sub": operator.sub,
  "_operator.floordiv": operator.floordiv,
}
