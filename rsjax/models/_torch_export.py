"""Any PyTorch ``nn.Module`` as an rsjax model, through ``torch.export`` (needs PyTorch).

``from_torch_module(module, example_input)`` captures the module's eval-mode forward with
``torch.export`` (a dynamic batch), lowers it to Core ATen operators
(``run_decompositions()``), writes the graph as JSON (``_torch_graph``) and the module's
parameters, buffers and constants as arrays, then checks that the JAX model gives the
module's logits on the example. Layout and normalization:

* the module takes what it takes in PyTorch, e.g. NCHW ``[b, C, H, W]`` images; the rsjax
  model takes NHWC ``[b, H, W, C]`` in [0, 1], transposed once at the input;
* ``normalize`` (default None) is applied to the [0, 1] input before the module, as
  rsjax's own models do (a module that normalizes its input itself takes None).
"""

from __future__ import annotations

import importlib.util
import math
import os
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
from flax import nnx

from rsjax.models._bridge import EvalApply, to_apply_fn
from rsjax.models._layers import NormalizeArg, resolve_normalization
from rsjax.models._torch_graph import GRAPH_FORMAT, TorchGraph, check_graph, graph_digest

__all__ = ["capture", "from_torch_module", "load_module", "load_torch_module"]

#: The largest ``max |logit difference| / max(1, max |logit|)`` between the module and its
#: JAX model on the example that a conversion accepts (float32 rounding is far below).
LOGIT_TOLERANCE = 1e-3


def _torch():
  try:
    import torch
  except ImportError:
    raise ImportError(
      "converting a PyTorch module needs PyTorch: pip install 'rsjax[torch]'"
    ) from None
  return torch


def _op_name(target: Any) -> str:
  """``"aten.convolution.default"``, ``"operator.getitem"``: the name a rule is filed under."""
  if hasattr(target, "_schema") or type(target).__name__ == "OpOverload":
    return str(target)
  module = getattr(target, "__module__", None) or ""
  return f"{module.lstrip('_')}.{getattr(target, '__name__', str(target))}"


def _arg(a: Any) -> Any:
  """A node argument as JSON (``_torch_graph``'s encoding)."""
  torch = _torch()
  if isinstance(a, torch.fx.Node):
    return {"n": a.name}
  if isinstance(a, (list, tuple)):
    return [_arg(v) for v in a]
  if isinstance(a, torch.dtype):
    return {"dtype": str(a).removeprefix("torch.")}
  if isinstance(a, float) and not math.isfinite(a):
    return {"float": repr(a)}
  if a is None or isinstance(a, (bool, int, float, str)):
    return a
  if isinstance(a, (torch.device, torch.layout, torch.memory_format)):
    return {"torch": str(a)}
  raise ValueError(f"an argument of type {type(a).__name__} ({a!r}) cannot be written")


def _as_array(value: Any, name: str) -> np.ndarray:
  """A weight as a NumPy array: floats as float32, integers as int32 (JAX's default)."""
  torch = _torch()
  if not isinstance(value, torch.Tensor):
    raise ValueError(f"the module's constant {name!r} is a {type(value).__name__}, not a tensor")
  t = value.detach().cpu()
  if t.is_floating_point():
    return t.float().numpy()
  if t.dtype == torch.bool:
    return t.numpy()
  a = t.numpy()
  if a.size and (a.max() > np.iinfo(np.int32).max or a.min() < np.iinfo(np.int32).min):
    raise ValueError(f"the integer constant {name!r} does not fit in int32")
  return a.astype(np.int32)


def _placeholders(ep) -> tuple[list[list], dict[str, np.ndarray]]:
  """``(placeholders, weights)``: each placeholder's name and weight (None: the input), and
  the arrays of the weights the graph reads."""
  torch = _torch()
  kind = torch.export.graph_signature.InputKind
  used = {n.name for n in ep.graph.nodes if n.op == "placeholder" and n.users}
  values = {**ep.state_dict, **ep.constants}
  places, weights, inputs = [], {}, 0
  for spec in ep.graph_signature.input_specs:
    name = spec.arg.name
    if spec.kind == kind.USER_INPUT:
      places.append([name, None])
      inputs += 1
    elif spec.kind in (kind.PARAMETER, kind.BUFFER, kind.CONSTANT_TENSOR):
      if name in used:
        places.append([name, spec.target])
        weights[spec.target] = _as_array(values[spec.target], spec.target)
    else:
      raise ValueError(f"the exported module takes a {spec.kind.name} input ({name!r})")
  if inputs != 1:
    raise ValueError(f"the module's forward takes {inputs} tensors; rsjax feeds it one")
  return places, weights


def _nodes(ep) -> tuple[list[list], Any]:
  """``(nodes, output)`` of the graph as JSON."""
  nodes, output = [], None
  for n in ep.graph.nodes:
    if n.op == "call_function":
      kwargs = {k: _arg(v) for k, v in n.kwargs.items()}
      nodes.append([n.name, _op_name(n.target), _arg(list(n.args)), kwargs])
    elif n.op == "output":
      outs = n.args[0]
      if len(outs) != 1:
        raise ValueError(
          f"the module returns {len(outs)} tensors; rsjax certifies one tensor of logits"
        )
      output = _arg(outs[0])
    elif n.op != "placeholder":
      raise ValueError(f"the exported graph holds a {n.op!r} node ({n.name}); not supported")
  return nodes, output


def capture(module, example) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
  """``(graph, weights)``: the module's eval-mode forward as a Core ATen graph (JSON) and the
  arrays it reads.

  Args:
    module: the ``torch.nn.Module`` (set to eval mode here).
    example: a batch it takes (``torch.Tensor``, e.g. NCHW ``[b, C, H, W]``); the batch size
      is left dynamic.

  Raises:
    ValueError: ``torch.export`` cannot capture the forward (one line, its reason), or the
      graph holds what a model cannot (several inputs or outputs).
    UnsupportedOperatorError: the first operator with no rule in JAX.
  """
  torch = _torch()
  module = module.eval()
  if example.shape[0] < 2:  # a batch of 1 would be specialized: export sees 2
    example = example.expand(2, *example.shape[1:]).contiguous()
  dynamic = ({0: torch.export.Dim.DYNAMIC},)
  try:
    with torch.no_grad(), warnings.catch_warnings():
      warnings.simplefilter("ignore", FutureWarning)  # torch's own deprecations, not the user's
      ep = torch.export.export(module, (example,), dynamic_shapes=dynamic, strict=False)
      ep = ep.run_decompositions()
  except Exception as e:  # noqa: BLE001 - torch.export raises many kinds
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    raise ValueError(
      f"torch.export cannot capture the module: {type(e).__name__}: {first}"
    ) from None
  places, weights = _placeholders(ep)
  nodes, output = _nodes(ep)
  shapes = {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in weights.items()}
  graph = {
    "format": GRAPH_FORMAT,
    "weights": shapes,
    "placeholders": places,
    "nodes": nodes,
    "output": output,
  }
  check_graph(graph)
  return graph, weights


def _rsjax_shape(example) -> tuple[int, ...]:
  """One input as rsjax sees it: ``(H, W, C)`` of an NCHW batch, else the batch's shape."""
  shape = tuple(int(d) for d in example.shape[1:])
  return (*shape[1:], shape[0]) if len(shape) == 3 else shape


def load_torch_module(
  module, example_input, *, normalize: NormalizeArg = None, check: bool = True
) -> tuple[nnx.Module, dict[str, Any]]:
  """The rsjax model (:class:`~rsjax.models._torch_graph.TorchGraph`) of a PyTorch module.

  Args:
    module: a ``torch.nn.Module`` mapping a batch to logits ``[b, num_classes]`` (any
      forward ``torch.export`` captures; eval mode is used).
    example_input: a batch it takes, as PyTorch gives it (``torch.Tensor`` or array, NCHW
      ``[b, C, H, W]`` for images; inputs in [0, 1] when ``normalize`` is None).
    normalize: None (the module takes [0, 1] pixels as they are), a dataset name or a
      ``(mean, std)`` pair applied before the module.
    check: compare the model's logits with the module's on the example (raises if they
      differ by more than ``LOGIT_TOLERANCE`` of their scale).

  Returns:
    ``(model, config)``: the NNX model (NHWC ``[b, H, W, C]`` inputs in [0, 1]) and the
    config that rebuilds it (``rsjax.models.save_model``): ``model`` ``"torch_graph"``,
    ``model_kwargs`` ``{"graph", "normalize"}``, ``torch_arch`` (the module's class),
    ``graph_digest`` and ``normalization`` (said in words).
  """
  torch = _torch()
  example = torch.as_tensor(np.asarray(example_input, np.float32))
  graph, weights = capture(module, example)
  with torch.no_grad():
    expected = module(example).detach().float().numpy()
  if expected.ndim != 2:
    raise ValueError(f"the module returns shape {tuple(expected.shape)}, not [b, num_classes]")
  input_shape = _rsjax_shape(example)
  norm = resolve_normalization(normalize, input_shape[-1] if len(input_shape) == 3 else 1)
  model = TorchGraph(
    input_shape=input_shape, num_classes=expected.shape[1], graph=graph, normalize=normalize
  )
  for name, value in weights.items():
    model.weights[name].set_value(value)
  if check:
    _check_logits(model, example, expected, normalize)
  config = {
    "model": "torch_graph",
    "num_classes": int(expected.shape[1]),
    "input_shape": list(input_shape),
    "model_kwargs": {"graph": graph, "normalize": _json_normalize(normalize)},
    "torch_arch": type(module).__name__,
    "graph_digest": graph_digest(graph),
    "normalization": _normalization_text(norm),
  }
  return model, config


def _json_normalize(normalize: NormalizeArg) -> Any:
  if normalize is None or isinstance(normalize, str):
    return normalize
  mean, std = normalize
  return [np.ravel(mean).tolist(), np.ravel(std).tolist()]


def _normalization_text(norm) -> str:
  if norm is None:
    return "none: the module takes [0, 1] inputs as they are"
  mean, std = norm
  fmt = lambda v: ", ".join(f"{x:g}" for x in v)  # noqa: E731
  return f"mean ({fmt(mean)}) std ({fmt(std)}): applied before the module"


def _check_logits(model, example, expected: np.ndarray, normalize) -> None:
  """Raises when the model's logits on ``example`` are not the module's (``expected``)."""
  import jax

  x = example.numpy()
  if normalize is not None:  # the module saw the normalized example: undo it for rsjax
    mean, std = resolve_normalization(normalize, x.shape[1] if x.ndim == 4 else 1)
    shape = (1, -1, 1, 1) if x.ndim == 4 else (1, -1)
    x = x * np.reshape(std, shape) + np.reshape(mean, shape)
  if x.ndim == 4:
    x = x.transpose(0, 2, 3, 1)
  apply_fn, params = to_apply_fn(model)
  got = np.asarray(jax.jit(apply_fn)(params, x), np.float64)
  scale = max(1.0, float(np.max(np.abs(expected))))
  diff = float(np.max(np.abs(got - expected)))
  if not diff <= LOGIT_TOLERANCE * scale:
    raise ValueError(
      f"the JAX model's logits differ from the module's by {diff:.3g} (scale {scale:.3g}) on "
      "the example: a rule is wrong for this module; please report it"
    )


def from_torch_module(
  module, example_input, *, normalize: NormalizeArg = None
) -> tuple[EvalApply, nnx.State]:
  """``(apply_fn, params)`` of any PyTorch module, ready for ``rsjax.certify``.

  ``apply_fn(params, x)`` maps NHWC ``[b, H, W, C]`` inputs in [0, 1] to the module's
  logits; see :func:`load_torch_module` for the arguments. Example::

    apply_fn, params = rsjax.models.from_torch_module(net, torch.rand(1, 3, 32, 32))
    cert = rsjax.certify(key, apply_fn, params, x, sigma=0.25, num_classes=10)
  """
  model, _ = load_torch_module(module, example_input, normalize=normalize)
  return to_apply_fn(model)


def load_module(spec: str, checkpoint: str | None = None):
  """The ``nn.Module`` a command names: ``FILE.pt`` (a ``torch.save``d module, unpickled: its
  class must be importable, and only trusted files should be given) or ``FILE.py:CLASS``
  (built with no arguments; ``checkpoint``: its state dict, or a dict with one under
  ``'state_dict'``, ``module.`` prefixes dropped).

  Raises:
    ValueError: a file or class that cannot be read or built (one line).
  """
  torch = _torch()
  path, sep, cls = spec.rpartition(":")
  if sep and path.endswith(".py") and cls.isidentifier():
    module = _build(path, cls)
  else:
    if checkpoint is not None:
      raise ValueError(f"a checkpoint goes with FILE.py:CLASS, not with the module {spec!r}")
    if not os.path.isfile(spec):
      raise ValueError(f"module file {spec!r} does not exist (FILE.pt or FILE.py:CLASS)")
    try:
      module = torch.load(spec, map_location="cpu", weights_only=False)
    except (ImportError, AttributeError) as e:
      raise ValueError(
        f"cannot unpickle the module in {spec!r} ({e}): its class must be importable "
        "(PYTHONPATH), or give FILE.py:CLASS and its state dict"
      ) from None
  if not isinstance(module, torch.nn.Module):
    raise ValueError(f"{spec!r} holds a {type(module).__name__}, not a torch.nn.Module")
  if checkpoint is not None:
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    if isinstance(state, Mapping) and "state_dict" in state:
      state = state["state_dict"]
    state = {k.removeprefix("module."): v for k, v in state.items()}
    try:
      module.load_state_dict(state)
    except RuntimeError as e:
      raise ValueError(f"{checkpoint!r} does not fit {spec}: {str(e).splitlines()[0]}") from None
  return module.eval()


def _build(path: str, cls: str):
  if not os.path.isfile(path):
    raise ValueError(f"module file {path!r} does not exist")
  spec = importlib.util.spec_from_file_location(f"rsjax_user_{os.getpid()}", path)
  mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
  spec.loader.exec_module(mod)  # type: ignore[union-attr]
  if not hasattr(mod, cls):
    raise ValueError(f"{path!r} defines no {cls!r}")
  try:
    return getattr(mod, cls)()
  except TypeError as e:
    raise ValueError(f"{cls}() cannot be built with no arguments: {e}") from None
