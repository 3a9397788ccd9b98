"""A ``torch.export`` graph run in JAX: the model of a PyTorch module taken as it is.

The graph (``_torch_export.capture`` writes it from an ``nn.Module``) is plain JSON, so a
model directory holds it in its ``config.json`` and certifies without PyTorch::

  {"format": "rsjax-aten/1",
   "weights": {"conv.weight": {"shape": [16, 3, 3, 3], "dtype": "float32"}, ...},
   "placeholders": [["p_conv_weight", "conv.weight"], ..., ["x", null]],  # null: the input
   "nodes": [["convolution", "aten.convolution.default", [{"n": "x"}, {"n": "conv.weight"},
              null, [1, 1], [1, 1], [1, 1], false, [0, 0], 1], {}], ...],
   "output": {"n": "addmm"}}

An argument is a JSON value, ``{"n": name}`` (the value of a placeholder or node),
``{"dtype": "float32"}`` (a PyTorch dtype), ``{"float": "inf"}`` (a non-finite float) or
``{"torch": text}`` (a device, layout or memory format, which JAX does not need). The nodes are
Core ATen operators (``RULES`` of ``_aten``) and the size operators of a dynamic batch
(``SYMBOLIC``).

:class:`TorchGraph` is the NNX model: the weights (the module's parameters, buffers and
constants, in PyTorch's layout: the graph reads them so) and the graph, which is static. It
takes NHWC images ``[b, H, W, C]`` in [0, 1] like every rsjax model: the optional
normalization first, then the module's graph on its NCHW images stored channels-last
(``_aten_layout``; a transpose only where an operator reads PyTorch's own layout).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from rsjax.models._aten import RULES, SYMBOLIC, dtype_of
from rsjax.models._aten_layout import LAYOUT_RULES, ChannelsLast, has_layout, own
from rsjax.models._layers import NormalizeArg, normalize_layer, normalized

__all__ = [
  "GRAPH_FORMAT",
  "TorchGraph",
  "UnsupportedOperatorError",
  "check_graph",
  "graph_digest",
  "run_graph",
]

#: The ``format`` of a graph this module runs.
GRAPH_FORMAT = "rsjax-aten/1"


class UnsupportedOperatorError(ValueError):
  """A graph names an operator with no rule (``operator``: its name)."""

  def __init__(self, op: str, node: str, count: int):
    self.operator = op
    super().__init__(
      f"the exported graph uses {op} (node {node!r}; {count} operator(s) without a rule in "
      "all), which rsjax.models cannot run in JAX yet: see docs/guides/torch-module.md"
    )


def graph_digest(graph: Mapping[str, Any]) -> str:
  """The SHA-256 (hex) of the graph's canonical JSON: what the run record binds."""
  from rsjax.records.canonical import digest

  return digest(dict(graph))


def check_graph(graph: Mapping[str, Any]) -> None:
  """Checks a graph's format and that every operator has a rule.

  Raises:
    ValueError: another format, or a malformed graph.
    UnsupportedOperatorError: the first operator (in graph order) with no rule.
  """
  if graph.get("format") != GRAPH_FORMAT:
    raise ValueError(f"graph format {graph.get('format')!r} is not {GRAPH_FORMAT!r}")
  for key in ("weights", "placeholders", "nodes", "output"):
    if key not in graph:
      raise ValueError(f"graph has no {key!r} entry")
  unknown = [(n[1], n[0]) for n in graph["nodes"] if n[1] not in RULES and n[1] not in SYMBOLIC]
  if unknown:
    raise UnsupportedOperatorError(unknown[0][0], unknown[0][1], len({op for op, _ in unknown}))


def _value(arg: Any, env: Mapping[str, Any]) -> Any:
  """A JSON argument as the rule takes it."""
  if isinstance(arg, list):
    return [_value(a, env) for a in arg]
  if isinstance(arg, dict):
    if "n" in arg:
      return env[arg["n"]]
    if "dtype" in arg:
      return arg["dtype"]
    if "float" in arg:
      return float(arg["float"])
    return None  # {"torch": ...}: a device, layout or memory format
  return arg


def _call(node: Sequence[Any], env: Mapping[str, Any]) -> Any:
  """The value of one node: its channels-last rule where its arguments are channels-last (or
  it is a convolution) and the rule takes them, else its rule in PyTorch's layout."""
  name, op, args, kwargs = node
  args = [_value(a, env) for a in args]
  kwargs = {k: _value(v, env) for k, v in kwargs.items()}
  try:
    layout_rule = LAYOUT_RULES.get(op)
    if layout_rule is not None and (op == "aten.convolution.default" or has_layout(args)):
      out = layout_rule(*args, **kwargs)
      if out is not NotImplemented:
        return out
    rule = RULES.get(op) or SYMBOLIC[op]
    return rule(*own(args), **own(kwargs))
  except (TypeError, ValueError) as e:
    raise ValueError(f"node {name!r} ({op}): {e}") from None


def run_graph(
  graph: Mapping[str, Any],
  weights: Mapping[str, jax.Array],
  x: jax.Array,
  *,
  channels_last: bool = False,
) -> Any:
  """Evaluates the graph on the input ``x``.

  Args:
    graph: the graph (:func:`check_graph` passed).
    weights: ``{name: array}`` of every weight the placeholders name.
    x: the module's input in its own layout (NCHW ``[b, C, H, W]``), or with
      ``channels_last`` a 4-D image ``[b, H, W, C]`` (the graph then keeps its images
      channels-last wherever its operators allow, ``_aten_layout``: the same numbers up to
      float rounding, faster on XLA:CPU).

  Returns:
    The graph's output (its one tensor, in PyTorch's layout).
  """
  env: dict[str, Any] = {}
  if channels_last:
    x = ChannelsLast(x)
  for name, source in graph["placeholders"]:
    env[name] = x if source is None else weights[source]
  for node in graph["nodes"]:
    env[node[0]] = _call(node, env)
  return own(_value(graph["output"], env))


class TorchGraph(nnx.Module):
  """The JAX model of an exported PyTorch module (eval mode; :func:`run_graph`).

  Args:
    input_shape: one input as rsjax sees it, ``(H, W, C)`` for images (the module takes
      ``(C, H, W)``); other ranks are passed as they are.
    num_classes: the number of logits (the graph's output ``[b, num_classes]``).
    graph: the exported graph (JSON, see the module's docstring).
    normalize: ``(x - mean) / std`` before the module (None: the module takes [0, 1]
      inputs as they are, e.g. it normalizes them itself).
    dtype: unused (the graph computes in its weights' dtypes); for ``create_model``.
    rngs: unused (the weights are set by the caller); for ``create_model``.
  """

  def __init__(
    self,
    *,
    input_shape: Sequence[int],
    num_classes: int,
    graph: Mapping[str, Any],
    normalize: NormalizeArg = None,
    dtype: Any = None,
    rngs: Any = None,
  ):
    del dtype, rngs
    check_graph(graph)
    self.input_shape = tuple(int(d) for d in input_shape)
    self.num_classes = int(num_classes)
    # static, hashed as text: the graph definition of every apply_fn holds it
    self.graph_json = json.dumps(dict(graph), sort_keys=True, separators=(",", ":"))
    channels = self.input_shape[-1] if len(self.input_shape) == 3 else 1
    self.normalize = nnx.data(normalize_layer(normalize, channels))
    self.weights = nnx.Dict(
      {
        name: nnx.Param(jnp.zeros(tuple(w["shape"]), dtype_of(w["dtype"])))
        for name, w in graph["weights"].items()
      }
    )

  @property
  def graph(self) -> dict[str, Any]:
    """The graph, parsed (once per trace)."""
    return json.loads(self.graph_json)

  def __call__(self, x: jax.Array) -> jax.Array:
    """``x`` ``[b, *input_shape]`` in [0, 1] -> logits ``[b, num_classes]``."""
    x = normalized(self, x)
    weights = {name: w[...] for name, w in self.weights.items()}
    # NHWC is the module's NCHW stored channels-last: no transpose (_aten_layout)
    y = run_graph(self.graph, weights, x, channels_last=x.ndim == 4)
    if not hasattr(y, "shape") or y.shape[1:] != (self.num_classes,):
      shape = getattr(y, "shape", type(y).__name__)
      raise ValueError(f"the graph returns {shape}, not logits [b, {self.num_classes}]")
    return y
