"""The layout of a model's convolutions, and the same network with them channels-last.

Models ported from PyTorch often compute their convolutions NCHW
(``lax.conv_general_dilated(..., dimension_numbers=("NCHW", "OIHW", "NCHW"))``). XLA's CPU
backend computes a convolution channels-last: around each NCHW one it transposes the input,
the kernel and the output, and those passes cost as much as the convolutions of a small
network. :func:`conv_layouts` counts the convolutions of ``apply_fn`` by input layout;
:func:`channels_last` is ``apply_fn`` evaluated with every convolution output kept
channels-last: its jaxpr interpreted with a permutation carried per value, elementwise ops,
broadcasts, pooling, reductions and transposes run on the permuted values, and a value put back
in its own layout only where another op (a reshape, a matmul) reads it. Same function, same
numbers up to float rounding; what ``rsjax bench`` times against the model as written.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend import core

__all__ = ["channels_last", "conv_layouts"]

Perm = tuple[int, ...] | None  # stored = transpose(value, perm); None: the value's own layout

_ELEMENTWISE = frozenset(
  "abs add and atan2 ceil clamp convert_element_type cos div eq erf exp exp2 expm1 floor ge gt "
  "integer_pow is_finite le log log1p logistic lt max min mul ne neg not or pow rem round "
  "rsqrt select_n sign sin sqrt square sub tan tanh xor".split()
)
_WINDOWED = frozenset(["reduce_window_max", "reduce_window_min", "reduce_window_sum"])
_WINDOW_PARAMS = ("window_dimensions", "window_strides", "padding", "base_dilation")
_REDUCTIONS = frozenset(["reduce_sum", "reduce_max", "reduce_min", "argmax", "argmin"])
_INLINE = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr", "remat2": "jaxpr"}
_INLINE_CUSTOM = {"custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr"}


def _convs(jaxpr: Any) -> list[Any]:
  """The convolutions of ``jaxpr`` and of the jaxprs it calls."""
  out = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "conv_general_dilated":
      out.append(eqn)
    for sub in core.jaxprs_in_params(eqn.params):
      out += _convs(sub)
  return out


def _layout_name(spec: Sequence[int]) -> str:
  """``lhs_spec`` (batch, feature, spatial...) as a name: ``(0, 1, 2, 3)`` -> ``"NCHW"``."""
  letters = "NC" + "HWD"[: len(spec) - 2]  # of the axes in spec's order
  return "".join(letters[k] for k in _inverse(spec))


def conv_layouts(apply_fn: Callable[..., Any], params: Any, input_shape: Sequence[int]) -> dict:
  """``{"NHWC": 2, "NCHW": 0, ...}``: the convolutions of ``apply_fn(params, x)`` on one input
  ``x`` of ``[1, *input_shape]`` by the layout of their input (empty without convolutions)."""
  x = jax.ShapeDtypeStruct((1, *input_shape), jnp.float32)
  closed = jax.make_jaxpr(apply_fn)(params, x)
  names = (_layout_name(eqn.params["dimension_numbers"].lhs_spec) for eqn in _convs(closed.jaxpr))
  return dict(collections.Counter(names))


def _inverse(perm: Sequence[int]) -> tuple[int, ...]:
  return tuple(sorted(range(len(perm)), key=perm.__getitem__))


def _natural(value: Any, perm: Perm) -> Any:
  """The value in its own layout."""
  return value if perm is None else jnp.transpose(value, _inverse(perm))


def _to(value: Any, have: Perm, want: Perm) -> Any:
  """The value stored as ``want`` from stored as ``have``."""
  if have == want:
    return value
  natural = _natural(value, have)
  return natural if want is None else jnp.transpose(natural, want)


def _simplify(perm: Sequence[int]) -> Perm:
  return None if tuple(perm) == tuple(range(len(perm))) else tuple(perm)


def _conv(eqn: Any, ins: list[tuple[Any, Perm]]) -> tuple[Any, Perm]:
  """A convolution on the stored operands; its output stored (batch, spatial..., feature)."""
  (lhs, lp), (rhs, rp) = ins
  dn = eqn.params["dimension_numbers"]
  if lp is None:  # the input itself: one transpose, channels-last
    lp = (dn.lhs_spec[0], *dn.lhs_spec[2:], dn.lhs_spec[1])
    lhs = jnp.transpose(lhs, lp)
  rp = rp or tuple(range(rhs.ndim))
  out_perm = (dn.out_spec[0], *dn.out_spec[2:], dn.out_spec[1])
  new = lax.ConvDimensionNumbers(
    lhs_spec=tuple(_inverse(lp)[a] for a in dn.lhs_spec),
    rhs_spec=tuple(_inverse(rp)[a] for a in dn.rhs_spec),
    out_spec=tuple(_inverse(out_perm)[a] for a in dn.out_spec),
  )
  params = {**eqn.params, "dimension_numbers": new}
  return eqn.primitive.bind(lhs, rhs, **params), _simplify(out_perm)


def _elementwise(eqn: Any, ins: list[tuple[Any, Perm]]) -> tuple[Any, Perm]:
  """Operands of the output's rank stored as the largest permuted one; scalars as they are."""
  rank = eqn.outvars[0].aval.ndim
  permuted = [(jnp.size(v), p) for v, p in ins if p is not None and jnp.ndim(v) == rank]
  want = max(permuted, key=lambda t: t[0])[1] if permuted else None
  args = [_to(v, p, want) if jnp.ndim(v) == rank else v for v, p in ins]
  return eqn.primitive.bind(*args, **eqn.params), want


def _broadcast(eqn: Any, ins: list[tuple[Any, Perm]], target: Perm) -> tuple[Any, Perm]:
  """``broadcast_in_dim`` straight into the ``target`` layout of the output's rank."""
  (v, p), shape = ins[0], eqn.params["shape"]
  want = target if target is not None and len(target) == len(shape) else None
  if want is None:
    return eqn.primitive.bind(_natural(v, p), **eqn.params), None
  p = p or tuple(range(v.ndim))
  dims = [_inverse(want)[eqn.params["broadcast_dimensions"][a]] for a in p]
  order = sorted(range(len(dims)), key=dims.__getitem__)
  params = {
    **eqn.params,
    "shape": tuple(shape[a] for a in want),
    "broadcast_dimensions": tuple(sorted(dims)),
  }
  return eqn.primitive.bind(jnp.transpose(v, order), **params), want


def _windowed(eqn: Any, ins: list[tuple[Any, Perm]]) -> tuple[Any, Perm]:
  """Pooling: its per-axis parameters permuted as the operand is."""
  (v, p) = ins[0]
  assert p is not None  # _apply calls it with its operand permuted
  params = dict(eqn.params)
  for name in (*_WINDOW_PARAMS, "window_dilation"):
    params[name] = tuple(eqn.params[name][a] for a in p)
  return eqn.primitive.bind(v, **params), p


def _reduction(eqn: Any, ins: list[tuple[Any, Perm]]) -> tuple[Any, Perm]:
  """A reduction over the stored axes of the reduced ones; the kept axes keep their order."""
  (v, p) = ins[0]
  assert p is not None  # _apply calls it with its operand permuted
  axes = set(eqn.params["axes"])
  stored_axes = tuple(sorted(_inverse(p)[a] for a in axes))
  kept = [a for a in p if a not in axes]
  rank = sorted(kept)
  out_perm = _simplify([rank.index(a) for a in kept])
  return eqn.primitive.bind(v, **{**eqn.params, "axes": stored_axes}), out_perm


def _transpose(eqn: Any, ins: list[tuple[Any, Perm]]) -> tuple[Any, Perm]:
  """No data moved: the output is the operand, its permutation composed."""
  (v, p) = ins[0]
  inv = _inverse(eqn.params["permutation"])
  p = p or tuple(range(v.ndim))
  return v, _simplify([inv[a] for a in p])


def _eval(jaxpr: Any, consts: list[Any], args: list[tuple[Any, Perm]], target: Perm) -> list:
  """``jaxpr`` on stored ``(value, perm)`` arguments; its outputs stored, with their perms."""
  env: dict[Any, tuple[Any, Perm]] = {}

  def read(a: Any) -> tuple[Any, Perm]:
    return (a.val, None) if isinstance(a, core.Literal) else env[a]

  env.update({v: (c, None) for v, c in zip(jaxpr.constvars, consts, strict=True)})
  env.update(dict(zip(jaxpr.invars, args, strict=True)))
  for eqn in jaxpr.eqns:
    outs = _apply(eqn, [read(a) for a in eqn.invars], target)
    env.update(zip(eqn.outvars, outs, strict=True))
  return [read(a) for a in jaxpr.outvars]


def _apply(eqn: Any, ins: list[tuple[Any, Perm]], target: Perm) -> list[tuple[Any, Perm]]:
  name = eqn.primitive.name
  sub = _INLINE.get(name) or _INLINE_CUSTOM.get(name)
  if sub is not None and sub in eqn.params:
    closed = eqn.params[sub]
    inner = getattr(closed, "jaxpr", closed)
    return _eval(inner, list(getattr(closed, "consts", [])), ins, target)
  if any(p is not None for _, p in ins) or name == "broadcast_in_dim":
    rule = _RULES.get(name)
    if rule is not None:
      return [rule(eqn, ins)]
    if name == "broadcast_in_dim":
      return [_broadcast(eqn, ins, target)]
  if name == "conv_general_dilated":
    return [_conv(eqn, ins)]
  params = eqn.primitive.get_bind_params(eqn.params)
  out = eqn.primitive.bind(*[_natural(v, p) for v, p in ins], **params)
  out = out if eqn.primitive.multiple_results else [out]
  return [(o, None) for o in out]


_RULES: dict[str, Callable[[Any, list[tuple[Any, Perm]]], tuple[Any, Perm]]] = {
  "conv_general_dilated": _conv,
  "transpose": _transpose,
  **{n: _elementwise for n in _ELEMENTWISE},
  **{n: _windowed for n in _WINDOWED},
  **{n: _reduction for n in _REDUCTIONS},
}


def _target(jaxpr: Any) -> Perm:
  """The channels-last permutation of the first convolution's output, None without one."""
  convs = _convs(jaxpr)
  if not convs:
    return None
  spec = convs[0].params["dimension_numbers"].out_spec
  return _simplify((spec[0], *spec[2:], spec[1]))


def channels_last(apply_fn: Callable[..., Any]) -> Callable[..., Any]:
  """``apply_fn`` with every convolution output stored channels-last (module docstring).

  Args:
    apply_fn: ``apply_fn(params, x) -> logits``, ``x`` of ``[b, *input_shape]`` in the
      model's own layout (``[b, C, H, W]`` for an NCHW port).

  Returns:
    ``fn(params, x)``, the same function of the same arguments (re-traced per input shape).
  """

  def fn(params: Any, x: Any) -> Any:
    closed, shape = jax.make_jaxpr(apply_fn, return_shape=True)(params, x)
    leaves = jax.tree.leaves((params, x))
    target = _target(closed.jaxpr)
    outs = _eval(closed.jaxpr, list(closed.consts), [(v, None) for v in leaves], target)
    return jax.tree.unflatten(jax.tree.structure(shape), [_natural(v, p) for v, p in outs])

  return fn
