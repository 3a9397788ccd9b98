"""What one forward pass costs, counted from the model's jaxpr (the same on every backend).

``rsjax bench`` reports these as FLOPs per sample; the benchmarks import them from here.

XLA's ``cost_analysis()`` is not a FLOP count one can compare across devices: on
a GPU it leaves out the convolutions that run as cuDNN calls (ResNet-110 read
4.76 MFLOPs per sample there against 486 on CPU). The counts here walk the
traced program instead (``jax.make_jaxpr``, no backend involved), so the CPU and
the GPU report the same number for the same model:

* :func:`matmul_flops`: 2 x multiply-accumulates of every ``dot_general`` and
  ``conv_general_dilated`` (the convention of MFU figures; elementwise work,
  a few percent for these models, is left out);
* :func:`activation_elements`: the output elements of those same operations
  (the memory term of the bound in docs/PERFORMANCE.md).

LeNet's first convolution (one input channel) runs as elementwise multiply-adds in a named
scope; those count as the convolution they compute.

Both descend into nested jaxprs (``jit``, ``custom_jvp``, ``remat``, ...), and a
``scan`` counts its body ``length`` times.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["activation_elements", "matmul_flops", "op_costs"]


def _dot_flops(eqn: Any) -> int:
  (contract_lhs, _), _ = eqn.params["dimension_numbers"]
  lhs = eqn.invars[0].aval.shape
  k = math.prod(lhs[d] for d in contract_lhs)
  return 2 * math.prod(eqn.outvars[0].aval.shape) * k


def _conv_flops(eqn: Any) -> int:
  dn = eqn.params["dimension_numbers"]
  rhs = eqn.invars[1].aval.shape
  # Per output element: kernel spatial size x input features per group.
  k = math.prod(rhs[d] for d in dn.rhs_spec[2:]) * rhs[dn.rhs_spec[1]]
  return 2 * math.prod(eqn.outvars[0].aval.shape) * k


_COUNTERS = {"dot_general": _dot_flops, "conv_general_dilated": _conv_flops}

# LeNet's first convolution (up to 4 input channels) is written as multiply-adds of shifted
# images (faster on a CPU: ``rsjax.models.few_channel_conv``) inside this named scope: each ``mul`` there is one tap of the
# convolution (2 FLOPs per output element with its add), its ``stack`` (a
# ``concatenate`` in older JAX) the output.
_ELEMENTWISE_CONV = "few_channel_conv"


def _elementwise_conv(eqn: Any) -> tuple[int, int]:
  """``(FLOPs, output elements)`` of an equation of the elementwise convolution (0, 0 else)."""
  if _ELEMENTWISE_CONV not in str(eqn.source_info.name_stack):
    return 0, 0
  size = math.prod(eqn.outvars[0].aval.shape)
  if eqn.primitive.name == "mul":
    return 2 * size, 0
  if eqn.primitive.name in ("stack", "concatenate"):
    return 0, size
  return 0, 0


def _walk(jaxpr: Any, multiplier: int = 1) -> tuple[int, int]:
  from jax.extend import core as jex_core

  flops = elements = 0
  for eqn in jaxpr.eqns:
    count = _COUNTERS.get(eqn.primitive.name)
    if count is not None:
      flops += multiplier * count(eqn)
      elements += multiplier * math.prod(eqn.outvars[0].aval.shape)
    else:
      f, e = _elementwise_conv(eqn)
      flops, elements = flops + multiplier * f, elements + multiplier * e
    inner = multiplier * (int(eqn.params["length"]) if eqn.primitive.name == "scan" else 1)
    for v in eqn.params.values():
      for sub in v if isinstance(v, (list, tuple)) else (v,):
        if isinstance(sub, jex_core.ClosedJaxpr):
          sub = sub.jaxpr
        if isinstance(sub, jex_core.Jaxpr):
          f, e = _walk(sub, inner)
          flops, elements = flops + f, elements + e
  return flops, elements


def op_costs(
  apply_fn: Callable[..., Any],
  params: Any,
  input_shape: Sequence[int],
  dtype: Any = jnp.float32,
  batch: int = 1,
) -> tuple[int, int]:
  """``(matmul FLOPs, output elements)`` of matmuls and convolutions, for one sample.

  Args:
    apply_fn: ``apply_fn(params, x) -> logits``.
    params: its parameters (arrays or ``jax.ShapeDtypeStruct``).
    input_shape: the shape of one input (no batch axis).
    dtype: the input dtype to trace with.
    batch: the batch traced, the costs divided by it (a model packed by ``g``,
      ``rsjax.models.pack_narrow_stage``, pads a batch to a multiple of ``g``: trace ``g``).
  """
  x = jax.ShapeDtypeStruct((int(batch),) + tuple(input_shape), dtype)
  closed = jax.make_jaxpr(apply_fn)(params, x)
  flops, elements = _walk(closed.jaxpr)
  return flops // int(batch), elements // int(batch)


def matmul_flops(
  apply_fn: Callable[..., Any], params: Any, input_shape: Sequence[int], batch: int = 1
) -> float:
  """FLOPs of one forward pass of one sample: 2 x MACs of its matmuls and convolutions."""
  return float(op_costs(apply_fn, params, input_shape, batch=batch)[0])


def activation_elements(
  apply_fn: Callable[..., Any], params: Any, input_shape: Sequence[int], batch: int = 1
) -> int:
  """Output elements of the convolutions and dense layers of one forward pass (one sample)."""
  return int(op_costs(apply_fn, params, input_shape, batch=batch)[1])
