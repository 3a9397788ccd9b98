"""Every rule of ``rsjax.models._aten.RULES`` against PyTorch's own operator.

Each case calls ``torch.ops.aten.<name>`` and the rule on the same arguments (tensors as
arrays, dtypes as their names, as ``_torch_graph`` hands them over) and compares the first
output within float32 rounding (``atol`` 1e-5 on values of order 1). A rule without a case
fails ``test_every_rule_has_a_case``. Needs PyTorch (skipped without).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rsjax.models import _aten  # noqa: E402
from rsjax.models._aten_layout import LAYOUT_RULES  # noqa: E402

_G = torch.Generator().manual_seed(0)


def t(*shape, low=None):
  """A random float32 tensor (uniform in [low, 1] when ``low`` is given, else normal)."""
  if low is not None:
    return torch.rand(*shape, generator=_G) * (1 - low) + low
  return torch.randn(*shape, generator=_G)


X = t(2, 3, 7, 6)
F32 = torch.float32

#: ``{operator: [(args, kwargs), ...]}``: the cases of each rule.
CASES: dict[str, list[tuple[tuple, dict]]] = {
  "aten.convolution.default": [
    ((X, t(4, 3, 3, 3), t(4), [1, 1], [1, 1], [1, 1], False, [0, 0], 1), {}),
    ((X, t(6, 1, 3, 3), None, [2, 1], [0, 2], [2, 1], False, [0, 0], 3), {}),
    ((t(2, 3, 9), t(4, 3, 3), t(4), [2], [1], [1], False, [0], 1), {}),
  ],
  "aten.addmm.default": [((t(5), t(3, 4), t(4, 5)), {}), ((t(5), t(3, 4), t(4, 5)), {"beta": 2})],
  "aten.mm.default": [((t(3, 4), t(4, 5)), {})],
  "aten.bmm.default": [((t(2, 3, 4), t(2, 4, 5)), {})],
  "aten._native_batch_norm_legit_no_training.default": [
    ((X, t(3), t(3), t(3), t(3, low=0.5), 0.1, 1e-5), {}),
  ],
  "aten.native_group_norm.default": [((X, t(3), t(3), 2, 3, 42, 3, 1e-5), {})],
  "aten.native_layer_norm.default": [((t(2, 5, 8), [8], t(8), t(8), 1e-5), {})],
  "aten.gelu.default": [((X,), {}), ((X,), {"approximate": "tanh"})],
  "aten.hardtanh.default": [((X, 0.0, 6.0), {})],
  "aten.leaky_relu.default": [((X, 0.2), {})],
  "aten.clamp.default": [((X, -0.5, 0.5), {}), ((X, None, 0.1), {})],
  "aten.div.Tensor_mode": [((X, 0.3), {"rounding_mode": "floor"})],
  "aten.where.self": [((X > 0, X, t(1, 3, 1, 1)), {})],
  "aten.max_pool2d_with_indices.default": [
    ((X, [2, 2]), {}),
    ((X, [3, 3], [2, 2], [1, 1], [1, 1], True), {}),
  ],
  "aten.max_pool3d_with_indices.default": [((t(1, 2, 4, 5, 6), [2, 2, 2]), {})],
  "aten.avg_pool1d.default": [((t(2, 3, 9), [3], [2], [1]), {})],
  "aten.avg_pool2d.default": [
    ((X, [2, 2]), {}),
    ((X, [3, 3], [2, 2], [1, 1], True, True), {}),
    ((X, [3, 3], [2, 2], [1, 1], True, False), {}),
    ((X, [2, 2], [2, 2], [0, 0], False, True, 3), {}),
  ],
  "aten.avg_pool3d.default": [((t(1, 2, 4, 4, 6), [2, 2, 2]), {})],
  "aten._adaptive_avg_pool2d.default": [((t(2, 3, 8, 6), [2, 3]), {})],
  "aten.view.default": [((X, [2, -1]), {})],
  "aten._unsafe_view.default": [((X, [6, 42]), {})],
  "aten.reshape.default": [((X, [-1, 7]), {})],
  "aten.permute.default": [((X, [0, 2, 3, 1]), {})],
  "aten.expand.default": [((t(3, 1), [2, 3, 4]), {}), ((t(1, 4), [-1, 4]), {})],
  "aten.cat.default": [(([X, X[:, :1]], 1), {}), (([X, X], -1), {})],
  "aten.slice.Tensor": [((X, 2, 1, 5), {}), ((X, -1, 0, 100, 2), {})],
  "aten.select.int": [((X, 1, 2), {}), ((X, -1, -1), {})],
  "aten.squeeze.dims": [((t(2, 1, 3, 1), [1, 3]), {})],
  "aten.squeeze.dim": [((t(2, 1, 3), 1), {})],
  "aten.unsqueeze.default": [((X, 1), {}), ((X, -1), {})],
  "aten.split_with_sizes.default": [((X, [2, 5], 2), {})],
  "aten.split.Tensor": [((X, 4, 3), {})],
  "aten.constant_pad_nd.default": [((X, [1, 2, 0, 3], 0.5), {}), ((X, [-1, 1]), {})],
  "aten.clone.default": [((X,), {})],
  "aten.alias.default": [((X,), {})],
  "aten.lift_fresh_copy.default": [((X,), {})],
  "aten.detach.default": [((X,), {})],
  "aten._to_copy.default": [((X,), {"dtype": torch.int32}), ((X > 0,), {"dtype": F32})],
  "aten.full.default": [(([2, 3], 1.5), {"dtype": F32}), (([2], 7), {})],
  "aten.full_like.default": [((X, 0.25), {})],
  "aten.arange.start_step": [((1, 10, 2), {"dtype": F32})],
  "aten.arange.default": [((5,), {"dtype": torch.int64})],
  "aten.scalar_tensor.default": [((2.5,), {"dtype": F32})],
  "aten.mean.dim": [((X, [2, 3]), {}), ((X, [-1], True), {})],
  "aten.sum.dim_IntList": [((X, [1]), {}), ((X, None), {})],
  "aten.amax.default": [((X, [1]), {}), ((X, [2, 3], True), {})],
  "aten.amin.default": [((X, [1]), {})],
  "aten.any.dim": [((X > 1, -1, True), {})],
  "aten.any.dims": [((X > 1, [1, 2]), {})],
  "aten.all.dim": [((X > -1, 1), {})],
  "aten.var.correction": [((X, [2, 3]), {"correction": 1}), ((X, [1]), {"keepdim": True})],
  "aten._softmax.default": [((X, -1, False), {})],
  "aten._log_softmax.default": [((X, 1, False), {})],
  "aten.maximum.default": [((X, X.flip(0)), {})],
  "aten.minimum.default": [((X, X.flip(0)), {})],
}

_POSITIVE = t(2, 3, 7, 6, low=0.1)
_BINARY = ("add", "sub", "rsub", "mul", "div", "pow", "maximum", "minimum")
_COMPARE = ("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or")
_UNARY = (
  "relu sigmoid tanh exp log sqrt rsqrt neg abs erf sin cos reciprocal logical_not floor ceil"
)


def _elementwise_cases() -> dict[str, list[tuple[tuple, dict]]]:
  """A case of each element-wise rule in each of its forms that PyTorch has."""
  cases: dict[str, list[tuple[tuple, dict]]] = {}
  for name in _BINARY + _COMPARE:
    a, b = (_POSITIVE, _POSITIVE.flip(3)) if name == "pow" else (X, X.flip(2))
    for form, args, kw in (
      ("Tensor", (a, b), {}),
      ("Scalar", (a, 0.5), {}),
      ("Tensor_Scalar", (a, 2.0), {}),
    ):
      op = f"aten.{name}.{form}"
      if op in _aten.RULES and _torch_op(op) is not None:
        cases[op] = [(args, kw)]
  cases["aten.add.Tensor"].append(((X, X.flip(2)), {"alpha": 2}))
  cases["aten.pow.Scalar"] = [((2.0, X), {})]  # pow(Scalar self, Tensor exponent)
  for name in _UNARY.split():
    cases[f"aten.{name}.default"] = [((_POSITIVE if name in ("log", "sqrt", "rsqrt") else X,), {})]
  return cases


def _torch_op(name: str):
  """``torch.ops.aten.<op>.<overload>``, or None where PyTorch has no such overload."""
  _, op, overload = name.split(".")
  packet = getattr(torch.ops.aten, op, None)
  return getattr(packet, overload, None) if packet is not None else None


ALL_CASES = CASES | _elementwise_cases()
# rules that exist for forms PyTorch does not have are not cases (their names never appear)
_NO_OVERLOAD = sorted(op for op in _aten.RULES if _torch_op(op) is None)


def _jax_arg(a):
  if isinstance(a, torch.Tensor):
    return np.asarray(a.numpy())
  if isinstance(a, torch.dtype):
    return str(a).removeprefix("torch.")
  if isinstance(a, (list, tuple)):
    return [_jax_arg(v) for v in a]
  return a


def _first(out):
  return out[0] if isinstance(out, (tuple, list)) and not isinstance(out[0], int) else out


def test_every_rule_has_a_case():
  missing = sorted(set(_aten.RULES) - set(ALL_CASES) - set(_NO_OVERLOAD))
  assert not missing, missing


@pytest.mark.parametrize(
  "op,i",
  [(op, i) for op in sorted(ALL_CASES) for i in range(len(ALL_CASES[op]))],
)
def test_rule_matches_pytorch(op, i):
  args, kwargs = ALL_CASES[op][i]
  want = _torch_op(op)(*args, **kwargs)
  got = _aten.RULES[op](*_jax_arg(args), **{k: _jax_arg(v) for k, v in kwargs.items()})
  if isinstance(want, (tuple, list)) and op.startswith("aten.split"):
    assert len(got) == len(want)
    pairs = list(zip(got, want, strict=True))
  else:
    pairs = [(_first(got), _first(want))]
  for g, w in pairs:
    w = w.numpy()
    g = np.asarray(g)
    assert g.shape == w.shape, (g.shape, w.shape)
    if w.dtype == np.bool_:
      np.testing.assert_array_equal(g, w)
    else:
      np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), atol=1e-5, rtol=1e-5)


def _channels_last(v):
  """4-D arrays as ``ChannelsLast`` values (lists recursively), the rest as it is."""
  from rsjax.models._aten_layout import ChannelsLast

  if isinstance(v, np.ndarray) and v.ndim == 4:
    return ChannelsLast(np.ascontiguousarray(v.transpose(0, 2, 3, 1)))
  if isinstance(v, list):
    return [_channels_last(a) for a in v]
  return v


LAYOUT_CASES = [
  (op, i) for op in sorted(ALL_CASES) for i in range(len(ALL_CASES[op])) if op in LAYOUT_RULES
]


@pytest.mark.parametrize("op,i", LAYOUT_CASES)
def test_channels_last_rule_matches_pytorch(op, i):
  """The rule of ``_aten_layout`` on the same case, its 4-D inputs channels-last: PyTorch's
  result once put back in PyTorch's layout (or NotImplemented: the caller's fallback)."""
  from rsjax.models._aten_layout import own

  args, kwargs = ALL_CASES[op][i]
  want = _first(_torch_op(op)(*args, **kwargs)).numpy()
  jargs, jkw = _jax_arg(args), {k: _jax_arg(v) for k, v in kwargs.items()}
  # the images channels-last; a convolution's kernel stays OIHW (a weight, never an image)
  cl = [_channels_last(jargs[0]), *jargs[1:]] if "convolution" in op else _channels_last(jargs)
  got = LAYOUT_RULES[op](*cl, **jkw)
  if got is NotImplemented:
    assert op not in ("aten.convolution.default", "aten.cat.default") or args[0].ndim != 4
    return
  got = np.asarray(own(_first(got)))
  assert got.shape == want.shape, (got.shape, want.shape)
  np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
