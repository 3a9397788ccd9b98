"""Folded ResNets lower to what cuDNN fuses: convolution, bias, (residual), max(0).

XLA's ``CudnnFusedConvRewriter`` turns ``relu(conv(x, w) + bias [+ side input])``
into one cuDNN call when the convolution's result has one use and nothing (no
``convert``, no per-channel scale) stands between it and its epilogue. These
tests read the program the engine lowers (StableHLO, before any backend: XLA:CPU's
optimized HLO says nothing about cuDNN) for ResNet-20, ResNet-110 and ResNet-50
with batch norm folded (``rsjax.models.fold_batch_norm``), also packed
(``rsjax.models.pack_narrow_stage``), in float32 and bfloat16 as the engine casts
them (``rsjax.engine.step.cast_floating``, inside ``rsjax.engine.precision.context``), and
require for every convolution:

* its result has one use, an ``add`` of a per-channel bias broadcast in its dtype;
* that sum has one use: ``max(., 0)`` (``jax.nn.relu``, a call XLA inlines), or an
  ``add`` of the residual whose one use is ``max(., 0)``;
* no ``rsqrt`` in the program (no batch norm left).

Models are built abstractly (``nnx.eval_shape``): lowering needs shapes only.
"""

import collections
import functools
import re

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from rsjax import models
from rsjax.engine import precision as precision_lib
from rsjax.engine.step import cast_floating

_LINE = re.compile(r"^\s*(%[\w#.]+)(?::\d+)? = (?:stablehlo\.(\w+)|call (@[\w.]+))(.*)$")
_TYPE = re.compile(r"tensor<([^>]*)>")
_FUNC = re.compile(r"^\s*func\.func (?:public|private) (@[\w.]+)\(")

#: architecture -> (input shape, num_classes, convolutions, those ending in a residual sum:
#: each block's last and each projection shortcut's).
ARCHS = {
  "resnet20": ((32, 32, 3), 10, 1 + 9 * 2 + 2, 9 + 2),
  "resnet110": ((32, 32, 3), 10, 1 + 54 * 2 + 2, 54 + 2),
  "resnet50": ((224, 224, 3), 1000, 1 + 16 * 3 + 4, 16 + 4),
}
_ZERO = re.compile(r"^\s*dense<(-?0\.0*e[+-]00|0)> : tensor<\w+>$")


@functools.cache
def _abstract(name: str, pack: int):
  shape, classes = ARCHS[name][:2]

  def build():
    model = models.create_model(name, num_classes=classes, input_shape=shape, rngs=0)
    return models.pack_narrow_stage(models.fold_batch_norm(model)[0], pack)

  return nnx.eval_shape(build)


def _lowered(name: str, pack: int, precision: str) -> str:
  """The StableHLO text of the engine's forward pass (cast as the engine casts)."""
  apply_fn, variables = models.to_apply_fn(_abstract(name, pack))
  dtype = precision_lib.compute_dtype(precision)

  def forward(params, x):
    params = cast_floating(params, dtype)
    return apply_fn(params, x if dtype is None else x.astype(dtype))

  x = jax.ShapeDtypeStruct((8,) + ARCHS[name][0], jnp.float32)
  with precision_lib.context(precision):
    return jax.jit(forward).lower(variables, x).as_text()


class Program:
  """The ops of a StableHLO module's functions: ``{name: (op, operands, result type)}``,
  and the text after each constant (``dense<...> : tensor<...>``)."""

  def __init__(self, text: str):
    self.funcs: dict[str, dict[str, tuple[str, list[str], str]]] = {}
    self.constants: dict[tuple[str, str], str] = {}
    self.in_types: dict[tuple[str, str], list[str]] = {}
    self.order: dict[str, list[str]] = {}
    func = None
    for line in text.splitlines():
      m = _FUNC.match(line)
      if m:
        func = m.group(1)
        self.funcs[func], self.order[func] = {}, []
        continue
      m = _LINE.match(line)
      if m and func is not None:
        name, op, callee, rest = m.groups()
        operands = re.findall(r"%[\w#.]+", rest.split(" : ")[0])
        types = _TYPE.findall(rest)
        self.funcs[func][name] = (op or callee, operands, types[-1] if types else "")
        self.in_types[(func, name)] = types[:-1]
        if op == "constant":
          self.constants[(func, name)] = rest
        self.order[func].append(name)
    self.main = self.funcs["@main"]
    self.uses = collections.Counter(v for _, ops, _ in self.main.values() for v in ops)
    self.users = collections.defaultdict(list)
    for name, (_, ops, _) in self.main.items():
      for v in set(ops):
        self.users[v].append(name)

  def op(self, name: str) -> str:
    return self.main[name][0] if name in self.main else "argument"

  def is_relu(self, name: str) -> bool:
    """``max(x, 0)``: a ``maximum`` with a zero, or a call of a function that is one."""
    op, operands, _ = self.main[name]
    if op == "maximum":
      return any(self.is_zero("@main", v) for v in operands)
    if op.startswith("@"):
      body = self.funcs[op]
      return any(
        o == "maximum" and any(self.is_zero(op, v) for v in ops) for o, ops, _ in body.values()
      ) and all(o in ("constant", "broadcast_in_dim", "maximum") for o, _, _ in body.values())
    return False

  def is_zero(self, func: str, name: str) -> bool:
    """A (broadcast) constant zero."""
    body = self.funcs[func]
    while name in body and body[name][0] == "broadcast_in_dim":
      name = body[name][1][0]
    return bool(_ZERO.match(self.constants.get((func, name), "")))

  def only_user(self, name: str) -> str | None:
    users = self.users.get(name, [])
    return users[0] if self.uses[name] == 1 and len(users) == 1 else None


def _is_channel_vector(p: Program, name: str, conv_type: str) -> bool:
  """A broadcast of a ``[C]`` (or ``[1, 1, 1, C]``) bias to the convolution's shape."""
  op, _, out_type = p.main[name]
  if op != "broadcast_in_dim" or out_type != conv_type:
    return False
  (src_type,) = p.in_types[("@main", name)]
  *dims, _channels, dtype = src_type.split("x")
  return all(d == "1" for d in dims) and dtype == conv_type.split("x")[-1]


def epilogues(p: Program) -> collections.Counter:
  """``{epilogue kind: count}`` over the convolutions; raises on one cuDNN cannot fuse."""
  kinds = collections.Counter()
  for name in p.order["@main"]:
    if p.op(name) != "convolution":
      continue
    conv_type = p.main[name][2]
    add = p.only_user(name)
    assert add is not None and p.op(add) == "add", f"{name}: {p.uses[name]} uses, first {add}"
    (bias,) = [v for v in p.main[add][1] if v != name]
    assert _is_channel_vector(p, bias, conv_type), f"{name}: adds {p.op(bias)}, not a bias"
    assert p.main[add][2] == conv_type
    nxt = p.only_user(add)
    assert nxt is not None, f"{name}: the biased result has {p.uses[add]} uses"
    if p.is_relu(nxt):
      kinds["conv+bias+relu"] += 1
      continue
    assert p.op(nxt) == "add" and p.main[nxt][2] == conv_type, f"{name}: then {p.op(nxt)}"
    relu = p.only_user(nxt)
    assert relu is not None and p.is_relu(relu), f"{name}: residual sum used by {relu}"
    kinds["conv+bias+residual+relu"] += 1
  return kinds


CASES = [
  ("resnet20", 1),
  ("resnet20", 2),
  ("resnet20", 4),
  ("resnet110", 1),
  ("resnet110", 2),
  ("resnet50", 1),
]


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
@pytest.mark.parametrize("name, pack", CASES)
def test_every_folded_convolution_lowers_to_a_fusible_epilogue(name, pack, precision):
  text = _lowered(name, pack, precision)
  p = Program(text)
  convs = sum(1 for n in p.order["@main"] if p.op(n) == "convolution")
  assert convs == ARCHS[name][2]
  kinds = epilogues(p)
  assert kinds["conv+bias+residual+relu"] == ARCHS[name][3]
  assert kinds["conv+bias+relu"] == convs - ARCHS[name][3]
  assert "rsqrt" not in text
  dtype = "bf16" if precision == "bfloat16" else "f32"
  assert all(p.main[n][2].endswith(dtype) for n in p.order["@main"] if p.op(n) == "convolution")
  # Every ReLU is in the activations' dtype, its zero too (is_zero: a constant of the type).
  for body in p.funcs.values():
    for op, _, t in body.values():
      if op == "maximum":
        assert t.endswith(dtype)


def test_an_unfolded_batch_norm_is_what_the_check_catches():
  # The check is not vacuous: a model with its batch norms is refused by it.
  shape, classes = ARCHS["resnet20"][:2]
  model = nnx.eval_shape(
    lambda: models.create_model("resnet20", num_classes=classes, input_shape=shape, rngs=0)
  )
  apply_fn, variables = models.to_apply_fn(model)
  x = jax.ShapeDtypeStruct((2,) + shape, jnp.float32)
  text = jax.jit(apply_fn).lower(variables, x).as_text()
  assert "rsqrt" in text
  with pytest.raises(AssertionError):
    epilogues(Program(text))
