"""Where XLA:CPU spends a program's time, by kind of work (issue 66, item 1; run by
:mod:`benchmarks.cpu_profile`).

:func:`xla_breakdown`: a compiled program is run under ``jax.profiler.trace``, one call a trace;
each of XLA:CPU's thunks (a fusion, a convolution, a library call, a loop) is an event on one
of its threads. A thunk's event can close before its work is done (an Eigen convolution is
launched, then runs on the pool untraced while the launching thread waits), so each thunk is
given the wall time from its start to the next thunk's start (:func:`wall_times`): the
program's span, cut at the thunks' starts. Each thunk is put into a class by its HLO
instruction in the compiled program's text (:func:`hlo_index`): a fusion holding a
convolution is ``conv`` whatever its root (YNNPACK fuses a whole ResNet stage and the head into
one fusion), one holding a dot ``dense``, then the JAX op XLA names it after (``metadata
op_name``) and its output type decide:

``noise`` (Threefry's u32 words, ``erf_inv``), ``conv`` (``conv_general_dilated``, LeNet's
single-channel multiply-adds), ``dense`` (``dot_general``), ``pool`` (``reduce_window``, the
global average), ``count`` (argmax, the finite check, the histogram: s32 and bool outputs),
``loop/copy`` (copies, loops, slices), ``other`` (normalization, batch norm, ReLU, the add of
the noise). And by what runs it: a YNNPACK fusion, XLA's runtime kernel for a bare convolution
or dot (Eigen), XLA's own generated code, a loop. Milliseconds per 1000 samples, each class's
share of the traced span; ``thread_ms_per_1000``: the thunks' own event times summed over
threads (busy time as the events show it).

:func:`lenet_layers`: LeNet's forward cut at its layer boundaries (conv1, relu + pool1,
conv2, relu + pool2, the dense layers), each piece alone on the previous piece's output, in
rsjax and in the eager PyTorch twin, beside the whole forward of each (alternated).
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import gzip
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable

import numpy as np

try:
  import torch
except ImportError:  # benchmark-only extra
  torch = None

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from benchmarks.cpu_variants import Arm, alternate, aot  # noqa: E402
from rsjax import models  # noqa: E402

__all__ = [
  "CLASSES",
  "Instr",
  "classify",
  "hlo_index",
  "lenet_layers",
  "self_times",
  "xla_breakdown",
]

CLASSES = ("noise", "conv", "dense", "pool", "count", "loop/copy", "other")
_NOISE = ("threefry", "sample_noise", "erf_inv", "random_bits", "random_wrap", "fold_in")
_COUNT = ("argmax", "isfinite", "reduce_all", "class_counts", "scatter")
_LOOP = {
  "copy", "while", "call", "tuple", "get-tuple-element", "bitcast", "conditional", "parameter",
  "constant", "dynamic-slice", "dynamic-update-slice", "slice", "concatenate", "transpose",
}  # fmt: skip
_LINE = re.compile(r"^\s*(?:ROOT\s+)?%(\S+) = (.*)$")


def _split_type(rest: str) -> tuple[str, str]:
  """``(output type, the rest)`` of an instruction's right-hand side (a tuple type nests)."""
  if not rest.startswith("("):
    typ, _, tail = rest.partition(" ")
    return typ, tail
  depth = 0
  for i, ch in enumerate(rest):
    depth += (ch == "(") - (ch == ")")
    if depth == 0:
      return rest[: i + 1], rest[i + 1 :]
  return rest, ""


_HEADER = re.compile(r"^(?:ENTRY\s+)?%(\S+)\s+\(.*\{\s*$")
_LIBRARIES = (("__ynn_fusion", "YNNPACK"), ("__xnn_fusion", "XNNPACK"), ("__onednn", "oneDNN"))


@dataclasses.dataclass(frozen=True)
class Instr:
  """One HLO instruction of a compiled program: its opcode, output type, the JAX op it is
  named after, the opcodes of the computation it calls (a fusion's body, nested ones
  included) and what runs it (``runtime``: a library fusion, XLA's runtime kernels for a
  bare convolution or dot, XLA's own code, a loop)."""

  opcode: str
  typ: str
  op_name: str
  contents: frozenset = frozenset()
  runtime: str = "XLA codegen"


def hlo_index(text: str) -> dict[str, Instr]:
  """``{instruction name: Instr}`` of every instruction in a compiled program's text
  (``compiled.as_text()``), every computation included."""
  ops: dict[str, set] = collections.defaultdict(set)
  calls: dict[str, set] = collections.defaultdict(set)
  rows, comp = {}, ""
  for line in text.splitlines():
    h = _HEADER.match(line)
    if h is not None:
      comp = h[1]
      continue
    m = _LINE.match(line)
    if m is None:
      continue
    typ, rest = _split_type(m[2])
    op = re.match(r"\s*([\w\-]+)\(", rest)
    opcode = op[1] if op else ""
    ops[comp].add(opcode)
    called = re.findall(r"(?:calls|to_apply)=%([\w.\-]+)", line)
    calls[comp].update(called)
    name = re.search(r'op_name="([^"]*)"', line)
    runtime = next((lib for key, lib in _LIBRARIES if key in line), None)
    if runtime is None:
      bare = opcode in ("convolution", "dot", "custom-call")
      runtime = "XLA runtime kernel" if bare else "loop" if opcode in _LOOP else "XLA codegen"
    rows[m[1]] = (opcode, typ, name[1] if name else "", called, runtime)

  def contents(comps, seen) -> set:
    out = set()
    for c in comps:
      if c not in seen:
        seen.add(c)
        out |= ops[c] | contents(calls[c], seen)
    return out

  return {
    k: Instr(opcode, typ, op_name, frozenset(contents(called, set())), runtime)
    for k, (opcode, typ, op_name, called, runtime) in rows.items()
  }


def classify(i: Instr) -> str:
  """The class (:data:`CLASSES`) of one HLO instruction (see the module doc): a fusion holding
  a convolution is ``conv`` whatever its root (YNNPACK fuses a whole stage and the head into
  one), then one holding a dot is ``dense``, then the root's JAX op decides."""
  name, typ = i.op_name.lower(), i.typ
  if any(k in name for k in _NOISE) or typ.startswith("u32["):
    return "noise"
  if "convolution" in i.contents or i.opcode == "convolution":
    return "conv"
  if "conv_general_dilated" in name or "few_channel_conv" in name:
    return "conv"
  if "dot" in i.contents or "dot_general" in name or i.opcode == "dot":
    return "dense"
  if "reduce-window" in i.contents or "reduce_window" in name:
    return "pool"
  if "reduce_sum" in name and typ.startswith(("f32[", "bf16[")):
    return "pool"  # the global average pool (a sum, then a division)
  if i.opcode in _LOOP:
    return "loop/copy"
  if any(k in name for k in _COUNT) or "s32[" in typ or "pred[" in typ:
    return "count"
  return "other"


def self_times(events: list[dict]) -> list[tuple[str, float]]:
  """``(name, self microseconds)`` of each event: its duration less its children's on the same
  thread (events nest, they do not overlap, on one thread)."""
  threads = collections.defaultdict(list)
  for e in events:
    threads[e["pid"], e.get("tid")].append(e)
  out = []
  for evs in threads.values():
    evs.sort(key=lambda e: (float(e["ts"]), -float(e.get("dur", 0.0))))
    stack: list[list] = []  # [end, name, self]
    for e in evs:
      start, dur = float(e["ts"]), float(e.get("dur", 0.0))
      while stack and stack[-1][0] <= start:
        end, name, own = stack.pop()
        out.append((name, own))
      if stack:
        stack[-1][2] -= dur
      stack.append([start + dur, e["name"], dur])
    out += [(name, own) for _, name, own in stack]
  return out


def wall_times(events: list[dict], end: float) -> list[tuple[str, float]]:
  """``(name, microseconds)`` of each thunk event of one call: from its start to the next
  thunk's start (the last one's: to ``end``). A thunk's work done after its event closes (an
  Eigen convolution runs on the pool while the launching thread waits) is its own; thunks that
  overlap split the overlap in order of start."""
  evs = sorted(events, key=lambda e: float(e["ts"]))
  starts = [float(e["ts"]) for e in evs] + [end]
  return [(e["name"], max(starts[i + 1] - starts[i], 0.0)) for i, e in enumerate(evs)]


def _traced_call(fn: Callable[[], object], names) -> tuple[list[dict], float]:
  """The complete events of one call of ``fn`` whose name is one of ``names`` (the program's
  instructions) on any thread (XLA:CPU runs thunks on its pool and, inline, on the thread that
  launched the program: ``benchmarks.profile.device_events`` keeps only the former, right for
  a GPU), and when the program ended (its last thunk or the executor's wait for it)."""
  logdir = tempfile.mkdtemp()
  try:
    with jax.profiler.trace(logdir, create_perfetto_trace=True):
      fn()
    (path,) = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "perfetto_trace.json.gz"))
    with gzip.open(path, "rt", encoding="utf-8") as fh:
      events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
  finally:
    shutil.rmtree(logdir, ignore_errors=True)
  thunks = [e for e in events if e.get("name") in names]
  ends = [
    float(e["ts"]) + float(e.get("dur", 0.0))
    for e in events
    if e.get("name") in names or str(e.get("name")).startswith("ThunkExecutor::Execute")
  ]
  return thunks, max(ends, default=0.0)


def xla_breakdown(fn: Callable[[], object], hlo_text: str, samples: int, calls: int = 2) -> dict:
  """Milliseconds per 1000 samples of each class and each runtime (see the module doc) over
  ``calls`` calls of ``fn`` (one compiled program whose text is ``hlo_text``, ``samples``
  samples a call), traced one call at a time; each class's share; the costliest thunks."""
  fn()
  index = hlo_index(hlo_text)
  wall = dict.fromkeys(CLASSES, 0.0)
  busy = dict.fromkeys(CLASSES, 0.0)
  per_runtime: dict[str, float] = collections.defaultdict(float)
  per_thunk: dict[str, list] = {}
  scale = 1e-3 / (calls * samples) * 1000  # us -> ms per 1000 samples
  for _ in range(calls):
    thunks, end = _traced_call(fn, index)
    for name, us in wall_times(thunks, end):
      info = index[name]
      cls = classify(info)
      wall[cls] += us * scale
      per_runtime[info.runtime] += us * scale
      row = per_thunk.setdefault(name, [cls, info.runtime, info.op_name[-60:], 0.0])
      row[3] += us * scale
    for name, us in self_times(thunks):
      busy[classify(index[name])] += us * scale
  total = sum(wall.values())
  top = sorted(per_thunk.items(), key=lambda kv: -kv[1][3])[:12]
  return {
    "calls": calls,
    "samples": samples,
    "wall_ms_per_1000": wall,
    "share": {k: (v / total if total else 0.0) for k, v in wall.items()},
    "by_runtime": dict(per_runtime),
    "traced_wall_ms_per_1000": total,
    "thread_ms_per_1000": busy,
    "top_thunks": [
      {"thunk": n, "class": c, "runtime": r, "op_name": o, "ms": ms} for n, (c, r, o, ms) in top
    ],
  }


def _rsjax_pieces(model, batch: int, seed: int):
  """LeNet's forward cut into five jitted pieces (parameters as arguments), each with its input
  (the previous piece's output), and the whole forward."""
  from flax import nnx

  graphdef, state = nnx.split(model)

  def piece(fn):
    return lambda s, x: fn(nnx.merge(graphdef, s), x)

  def pool(x):
    return nnx.max_pool(nnx.relu(x), (2, 2), strides=(2, 2))

  def dense(m, x):
    x = x.reshape(x.shape[0], -1)
    return m.fc3(nnx.relu(m.fc2(nnx.relu(m.fc1(x)))))

  fns = {
    "conv1": piece(lambda m, x: m.first_conv(m.normalize(x))),
    "pool1": piece(lambda m, x: pool(x)),
    "conv2": piece(lambda m, x: m.conv2(x)),
    "pool2": piece(lambda m, x: pool(x)),
    "dense": piece(dense),
  }
  x = jnp.asarray(np.random.default_rng(seed).random((batch, 28, 28, 1), dtype=np.float32))
  inputs, h = {}, x
  for name, fn in fns.items():
    inputs[name] = h
    fns[name] = aot(fn, state, h)
    h = fns[name](state, h)
  apply_fn, variables = models.to_apply_fn(model)
  whole = aot(apply_fn, variables, x)
  diff = float(jnp.max(jnp.abs(h - whole(variables, x))))
  arms = {
    f"rsjax {k}": Arm(lambda f=f, a=inputs[k]: jax.block_until_ready(f(state, a)), batch)
    for k, f in fns.items()
  }
  arms["rsjax forward"] = Arm(lambda: jax.block_until_ready(whole(variables, x)), batch)
  return arms, np.asarray(x), diff


def _torch_pieces(model, x: np.ndarray, batch: int, threads: int):
  from rsjax.app.bench.torch_models import from_flax

  F = torch.nn.functional
  tm = from_flax(model, (28, 28, 1)).to(memory_format=torch.channels_last)
  fns = {
    "conv1": lambda t: tm.conv1(tm.normalize(t)),
    "pool1": lambda t: F.max_pool2d(F.relu(t), 2),
    "conv2": lambda t: tm.conv2(t),
    "pool2": lambda t: F.max_pool2d(F.relu(t), 2),
    "dense": lambda t: tm.fc3(F.relu(tm.fc2(F.relu(tm.fc1(t.flatten(1)))))),
  }
  xt = torch.from_numpy(np.array(x.transpose(0, 3, 1, 2), copy=True))
  xt = xt.contiguous(memory_format=torch.channels_last)
  inputs, h = {}, xt
  with torch.inference_mode():
    for name, fn in fns.items():
      inputs[name] = h
      h = fn(h)

  def timed(fn, a):
    def run():
      with torch.inference_mode():
        return fn(a)

    return run

  def setup():
    torch.set_num_threads(threads)

  arms = {f"torch {k}": Arm(timed(f, inputs[k]), batch, setup) for k, f in fns.items()}
  arms["torch forward"] = Arm(timed(tm, xt), batch, setup)
  return arms


def lenet_layers(
  *, batch: int = 1000, rounds: int = 3, min_s: float = 0.2, threads: int = 1, seed: int = 0
) -> dict:
  """LeNet's layers alone, rsjax and the eager twin (``threads`` PyTorch threads), and each
  side's whole forward; ``sum of layers`` against it shows what fusing across layers is worth."""
  model = models.create_model("lenet", num_classes=10, input_shape=(28, 28, 1), rngs=seed)
  arms, x, diff = _rsjax_pieces(model, batch, seed)
  if torch is not None:
    arms.update(_torch_pieces(model, x, batch, threads))
  times = alternate(arms, rounds, min_s)
  sums = {}
  for side in ("rsjax", "torch"):
    parts = [v["median"] for k, v in times.items() if k.startswith(side) and "forward" not in k]
    if parts:
      sums[f"{side} sum of layers"] = float(sum(parts))
  return {
    "batch": batch,
    "rounds": rounds,
    "torch_threads": threads,
    "pieces_vs_model_max_abs_diff": diff,
    "times": times,
    "sum_of_medians": sums,
  }
