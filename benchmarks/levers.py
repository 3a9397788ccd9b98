"""Issue 52's GPU levers, measured where no GPU is needed: on the CPU. :func:`levers` prints
and writes one JSON object with a section per measurement (``sections``):

* ``costs`` (levers 1, 2): per stage of the CIFAR ResNets at 32x32, FLOPs and output elements
  per sample (bytes in bf16 and float32), unpacked and packed (``pack_narrow_stage``, ``packs``),
  and the first stage's convolutions; counted from the traced program
  (``rsjax.app.bench.costs.op_costs``) on ``lcm(packs)`` rows. Stage 1 runs from the input to the
  first 32-channel block (packed: pack to unpack), ``head`` is the pooling and the dense layer;
  the stages sum to the model's ``op_costs`` (checked).
* ``program`` (levers 2, 3): the engine's counts program for ResNet-110 bf16, N = 100,000 at
  batch 14,288 (the H200's plan), with and without folding and packed by 2: in the lowered
  StableHLO the ``while``, ``case``/``if`` and convolution ops and the ops on activations
  between convolutions; in XLA:CPU's compiled HLO the ``while`` and ``conditional`` ops, and
  the compile seconds.
* ``timing`` (lever 4): the GPU suite's config for ResNet-20 and ResNet-50 bf16, rsjax alone,
  twice in new processes on one fresh compilation cache: cold, then warm; compile seconds
  apart from one certification's.
* ``lease`` (levers 5, 6): ``benchmarks/gpu_lease.sh all`` at its CPU smoke test's sizes, wall
  and per-stage seconds, and the compiled twin of the twin stage.

What the CPU cannot show (kernel choice, cuDNN fusion, host syncs, the compiled twin's ratio on
the device) is for the lease; see benchmarks/RESULTS.md.
"""

from __future__ import annotations

import collections
import json as jsonlib
import math
import os
import re
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from benchmarks.measure import dump_json
from rsjax import models
from rsjax import noise as noise_lib
from rsjax.app.bench.costs import op_costs
from rsjax.engine import counts as engine_counts
from rsjax.engine import precision as precision_lib
from rsjax.engine.step import make_chunk_plan
from rsjax.util import local_mesh

__all__ = ["levers", "program_shape", "stage_costs"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CIFAR = (32, 32, 3)
SECTIONS = ("costs", "program", "timing", "lease")
_EVAL = {"deterministic": True, "use_running_average": True}
#: The smoke test's sizes for the lease script's CPU dry run (tests/test_benchmarks_smoke.py):
#: the smallest that run every stage and write its JSON (N = n0 = batch = 8: one counts program
#: for both passes; two N for LeNet's fit; s3 on ResNet-20; the twin on the MLP, one
#: torch.compile mode), every limit x 100 (LIMIT_SCALE) so that no load reaches one.
LEASE_SMOKE = {
  "LIMIT_SCALE": "10000", "NUM": "8", "N0": "8", "IMAGES": "1", "BATCH": "8", "CONV_BATCH": "8",
  "LENET_NUMS": "8,16", "LENET_BATCH": "8", "R50_SIZE": "32", "R50_NUM": "8", "R50_BATCH": "8",
  "R110_MODEL": "resnet20", "TWIN_MODELS": "mlp", "TWIN_COMPILE": "default",
}  # fmt: skip


def _model(name: str, g: int = 1, fold: bool = False, input_shape=CIFAR, num_classes: int = 10):
  """An abstract (shapes only) model, batch norm folded if ``fold``, packed by ``g``."""

  def build():
    m = models.create_model(name, num_classes=num_classes, input_shape=input_shape, rngs=0)
    if fold:
      m = models.fold_batch_norm(m)[0]
    return models.pack_narrow_stage(m, g)

  return nnx.eval_shape(build)


# ----------------------------------------------------------------------------- costs (levers 1, 2)


def _width(block) -> int:
  convs = [c for c in vars(block).values() if isinstance(c, nnx.Conv)]
  return max(c.out_features for c in convs)


def _stage_plan(model) -> list[tuple[str, int, int]]:
  """``[(stage, lo, hi)]``: ``model.blocks[lo:hi]`` per stage (stage 1 also runs the stem,
  and a packed model's narrow blocks); then ``("head", 0, 0)``."""
  blocks = list(model.blocks)
  packed = isinstance(model, models.PackedResNet)
  lo = 0
  if not packed:  # stage 1: the leading blocks of the stem's width
    while lo < len(blocks) and _width(blocks[lo]) == model.stem_conv.out_features:
      lo += 1
  plan = [("stage1", 0, lo)]
  while lo < len(blocks):
    hi = lo
    while hi < len(blocks) and _width(blocks[hi]) == _width(blocks[lo]):
      hi += 1
    plan.append((f"stage{len(plan) + 1}", lo, hi))
    lo = hi
  return plan + [("head", 0, 0)]


def _run_stage(m, x, stage: str, lo: int, hi: int):
  """One stage of ``m`` (a ResNet or a PackedResNet) on ``x``: what its ``__call__`` does there."""
  packed = isinstance(m, models.PackedResNet)
  if stage == "head":
    return m.head(x.mean(axis=(1, 2)))
  if stage == "stage1":
    if packed:
      x = models.pack_batch(x, m.g)
    if m.normalize is not None:
      x = m.normalize(x)
    x = nnx.relu(m.stem_bn(m.stem_conv(x)))
    if m.stem_max_pool:
      x = nnx.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
    for block in m.narrow if packed else m.blocks[lo:hi]:
      x = block(x)
    return models.unpack_batch(x, m.g) if packed else x
  for block in m.blocks[lo:hi]:
    x = block(x)
  return x


def _eqns(jaxpr):
  """Every equation of a jaxpr and its sub-jaxprs."""
  for eqn in jaxpr.eqns:
    yield eqn
    for v in eqn.params.values():
      for sub in v if isinstance(v, (list, tuple)) else (v,):
        sub = getattr(sub, "jaxpr", sub)
        if hasattr(sub, "eqns"):
          yield from _eqns(sub)


def _conv_shapes(jaxpr) -> dict[str, int]:
  """``{"kxk I->O /s @HxW": count}`` of the convolutions (channels of one packed conv)."""
  shapes: collections.Counter = collections.Counter()
  for eqn in _eqns(jaxpr):
    if eqn.primitive.name != "conv_general_dilated":
      continue
    dn = eqn.params["dimension_numbers"]
    lhs, rhs = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
    k = "x".join(str(rhs[d]) for d in dn.rhs_spec[2:])
    hw = "x".join(str(lhs[d]) for d in dn.lhs_spec[2:])
    s = max(eqn.params["window_strides"])
    groups = eqn.params["feature_group_count"]
    cin = rhs[dn.rhs_spec[1]] * groups
    key = f"{k} {cin}->{rhs[dn.rhs_spec[0]]} /{s} @{hw}" + (
      f" groups {groups}" if groups > 1 else ""
    )
    shapes[key] += 1
  return dict(shapes)


def stage_costs(name: str, g: int, batch: int, input_shape=CIFAR) -> dict:
  """FLOPs and activation elements per sample, per stage, of ``name`` packed by ``g``."""
  model = _model(name, g, input_shape=input_shape)
  graphdef, state = nnx.split(nnx.view(model, raise_if_not_found=False, **_EVAL))
  shape, rows = tuple(input_shape), []
  first_convs = None
  for stage, lo, hi in _stage_plan(model):

    def f(state, x, stage=stage, lo=lo, hi=hi):
      return _run_stage(nnx.merge(graphdef, state), x, stage, lo, hi)

    flops, elems = op_costs(f, state, shape, batch=batch)
    x = jax.ShapeDtypeStruct((batch,) + shape, jnp.float32)
    if stage == "stage1":
      first_convs = _conv_shapes(jax.make_jaxpr(f)(state, x).jaxpr)
    rows.append({
      "stage": stage, "input_shape": list(shape), "flops_per_sample": flops,
      "activation_elements_per_sample": elems,
      "activation_bytes_per_sample": {"bf16": 2 * elems, "float32": 4 * elems},
    })  # fmt: skip
    shape = tuple(jax.eval_shape(f, state, x).shape[1:])
  apply_fn, variables = models.to_apply_fn(model)
  flops, elems = op_costs(apply_fn, variables, input_shape, batch=batch)
  assert (flops, elems) == (
    sum(r["flops_per_sample"] for r in rows),
    sum(r["activation_elements_per_sample"] for r in rows),
  ), f"{name} g={g}: the stages do not sum to the model"
  return {
    "model": name, "pack": g, "traced_batch": batch, "stages": rows,
    "total": {"flops_per_sample": flops, "activation_elements_per_sample": elems,
              "activation_bytes_per_sample": {"bf16": 2 * elems, "float32": 4 * elems}},
    "first_stage_convs": first_convs,
  }  # fmt: skip


# -------------------------------------------------------------------------- program (levers 2, 3)

_OP = re.compile(r"^\s*(?:%[\w#.:]+(?:, %[\w#.:]+)*) = (?:\"?stablehlo\.(\w+)|call (@[\w.]+))(.*)$")
_TYPE = re.compile(r"tensor<([^>]*)>")


def _activation_gaps(text: str, rows: set[int]) -> tuple[collections.Counter, int]:
  """The ops on activations (results of rank 4 or more, ``rows`` rows) between consecutive
  convolutions of a StableHLO module, as ``{"op > op > ...": count}``, and the number of
  convolutions."""
  ops = []
  for line in text.splitlines():
    m = _OP.match(line)
    if not m:
      continue
    op = m.group(1) or re.sub(r"_\d+$", "", m.group(2)).lstrip("@")
    types = _TYPE.findall(m.group(3))
    dims = types[-1].split("x")[:-1] if types else []
    ops.append((op, len(dims) >= 4 and int(dims[0]) in rows))
  convs = [i for i, (op, _) in enumerate(ops) if op == "convolution"]
  gaps = collections.Counter(
    " > ".join(op for op, act in ops[a + 1 : b] if act)
    for a, b in zip(convs, convs[1:], strict=False)
  )
  return gaps, len(convs)


def program_shape(name: str, g: int, fold: bool, *, num: int, batch: int, compile_: bool) -> dict:
  """The counts program of ``name`` in bf16 for one image: lowered and (``compile_``) compiled."""
  input_shape, classes = (CIFAR, 10) if name != "resnet50" else ((224, 224, 3), 1000)
  apply_fn, variables = models.to_apply_fn(_model(name, g, fold, input_shape, classes))
  x = np.zeros((1,) + input_shape, np.float32)
  sig = np.full((1, 1, 1, 1), 0.25, np.float32)
  ids = np.zeros((1,), np.uint32)
  plan = make_chunk_plan(1, num, batch, 1)
  static = dict(
    apply_fn=apply_fn, noise=noise_lib.get_noise(None).bind(x, sig), num_classes=classes,
    plan=plan, mesh=local_mesh(1), compute_dtype=precision_lib.compute_dtype("bfloat16"),
  )  # fmt: skip
  t = time.perf_counter()
  with precision_lib.context("bfloat16"):
    lowered = engine_counts._counts_jit.lower(jax.random.key(0), variables, x, sig, ids, **static)
  text = lowered.as_text()
  lower_s = time.perf_counter() - t
  gaps, convs = _activation_gaps(text, {plan.samples_per_step // g, plan.samples_per_step})
  # Elementwise passes per gap: the ops on activations but the broadcasts (of a bias, a constant).
  passes = sum(
    n * sum(op not in ("", "broadcast_in_dim") for op in seq.split(" > "))
    for seq, n in gaps.items()
  )
  out = {
    "model": name, "precision": "bf16", "pack": g, "fold_bn": fold, "num": num, "batch": batch,
    "steps": plan.steps_per_device, "lower_s": lower_s,
    "stablehlo": {
      "while": text.count("stablehlo.while"),
      "conditional": text.count("stablehlo.case") + text.count("stablehlo.if"),
      "convolution": convs, "rsqrt": text.count("stablehlo.rsqrt"),
      "ops_between_convs": dict(gaps.most_common()),
      "activation_ops_per_gap": passes / max(1, sum(gaps.values())),
    },
  }  # fmt: skip
  if compile_:
    t = time.perf_counter()
    hlo = lowered.compile().as_text()
    whiles = [ln for ln in hlo.splitlines() if re.search(r"\swhile\(", ln)]
    out["compiled_cpu"] = {
      "compile_s": time.perf_counter() - t,
      "while": len(whiles),
      "while_with_known_trip_count": sum("known_trip_count" in ln for ln in whiles),
      "known_trip_counts": sorted(
        int(n) for n in re.findall(r'known_trip_count":\{"n":"(\d+)"', hlo)
      ),
      "conditional": len(re.findall(r"\sconditional\(", hlo)),
      "convolution": len(re.findall(r"\sconvolution\(", hlo)),
    }
  return out


# ------------------------------------------------------------------------------ timing (lever 4)


def suite_timing(name: str, batch: int, *, num: int, n0: int, input_size: int | None) -> dict:
  """Two runs of the GPU suite's config, each its own process, on one fresh cache: cold, warm."""
  runs = {}
  with tempfile.TemporaryDirectory(prefix="levers_cache_") as tmp:
    cache = os.path.join(tmp, "cache")
    for run in ("cold", "warm"):
      out = os.path.join(tmp, f"{run}.json")
      sets = [f"models={name}", "precisions=bf16", f"num={num}", f"n0={n0}", "images=1",
              f"batch_size={batch}", "reference=false", f"compile_cache={cache}"]  # fmt: skip
      sets += [f"input_size={input_size}"] if input_size else []
      cmd = [sys.executable, "-m", "benchmarks.run", "--config", "benchmarks/configs/gpu_suite.py",
             "--set", f"json={out}", *[a for s in sets for a in ("--set", "args." + s)]]  # fmt: skip
      t = time.perf_counter()
      proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
      wall = time.perf_counter() - t
      if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: rc {proc.returncode}\n{proc.stdout[-2000:]}"
                           f"{proc.stderr[-2000:]}")  # fmt: skip
      with open(out, encoding="utf-8") as fh:
        (row,) = jsonlib.load(fh)["results"]
      rs = row["rsjax"]
      runs[run] = {
        "process_wall_s": wall, "compile_s": rs["compile_s"], "first_call_s": rs["first_call_s"],
        "certify_s": rs["seconds_per_image"],
      }  # fmt: skip
    runs["cache_files"] = len(os.listdir(cache))
  cold, warm = runs["cold"], runs["warm"]
  return {
    "model": name, "precision": "bf16", "input_size": input_size, "num": num, "n0": n0,
    "batch": batch, "command": " ".join(cmd[1:]).replace(tmp, "$TMP"), **runs,
    "compile_saved_s": cold["compile_s"] - warm["compile_s"],
    "first_call_saved_s": cold["first_call_s"] - warm["first_call_s"],
  }  # fmt: skip


# ------------------------------------------------------------------------------ lease (levers 5, 6)


def lease_dry_run(sizes: dict) -> dict:
  """``bash benchmarks/gpu_lease.sh all`` on the CPU at ``sizes``: wall and per-stage seconds."""
  with tempfile.TemporaryDirectory(prefix="levers_lease_") as tmp:
    out = os.path.join(tmp, "out")
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHON=sys.executable, OUT=out,
               CACHE_DIR=os.path.join(tmp, "cache"), **sizes)  # fmt: skip
    env.pop("XLA_FLAGS", None)
    t = time.perf_counter()
    proc = subprocess.run(["bash", "benchmarks/gpu_lease.sh", "all"], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    wall = time.perf_counter() - t
    with open(os.path.join(out, "stages.jsonl"), encoding="utf-8") as fh:
      stages = [jsonlib.loads(line) for line in fh if line.strip()]
    with open(os.path.join(out, "gpu.json"), encoding="utf-8") as fh:
      merged = {s["stage"]: s for s in jsonlib.load(fh)["stages"]}
  twins = {}
  for name, s in merged.items():
    for row in (s.get("data") or {}).get("results", []) if name.startswith("twin_") else []:
      twc = row.get("twin_compiled") or {}
      twins[name] = {
        "mode": twc.get("mode"), "compile_s": twc.get("compile_s"), "tried": twc.get("tried"),
        "twin_eager_s": (row.get("twin") or {}).get("seconds_per_image"),
        "twin_compiled_s": twc.get("seconds_per_image"),
        "rsjax_s": row["rsjax"]["seconds_per_image"],
        "ratio_to_twin_compiled": row.get("ratio_to_twin_compiled"),
      }  # fmt: skip
  return {
    "sizes": sizes, "rc": proc.returncode, "wall_s": wall,
    "stages": [{k: s[k] for k in ("stage", "status", "seconds", "limit")} for s in stages],
    "stage_seconds_sum": sum(s["seconds"] for s in stages), "twins": twins,
  }  # fmt: skip


def levers(
  *,
  sections: str = ",".join(SECTIONS),
  cost_models: str = "resnet110,resnet20",
  packs: str = "1,2,4",
  program_model: str = "resnet110",
  program_num: int = 100_000,
  program_batch: int = 14_288,
  compile_program: bool = True,
  timing: str = "resnet20:128,resnet50:96",
  num: int = 256,
  n0: int = 32,
  r50_size: int | None = None,
  json: str | None = None,
) -> dict:
  """The ``sections`` (comma-separated, of ``SECTIONS``): ``cost_models`` and ``packs`` for the
  costs; the program of ``program_model`` at ``program_num``, ``program_batch`` (``compile_program``:
  also compile it); ``timing``: MODEL:BATCH,... at ``num``, ``n0`` (ResNet-50 at
  ``r50_size``)."""
  chosen = [s for s in sections.split(",") if s]
  for s in chosen:
    if s not in SECTIONS:
      raise SystemExit(f"sections: unknown {s!r}")
  res: dict = {"jax": jax.__version__, "backend": jax.default_backend(), "sections": chosen}
  started = time.perf_counter()
  if "costs" in chosen:
    gs = [int(g) for g in packs.split(",")]
    res["costs"] = [
      stage_costs(m, g, math.lcm(*gs)) for m in cost_models.split(",") if m for g in gs
    ]
  if "program" in chosen:
    res["program"] = [
      program_shape(
        program_model, g, fold, num=program_num, batch=program_batch, compile_=compile_program
      )
      for g, fold in ((1, False), (1, True), (2, True))
    ]
  if "timing" in chosen:
    res["timing"] = []
    for item in timing.split(","):
      name, batch = item.split(":")
      size = r50_size if name == "resnet50" else None
      res["timing"].append(suite_timing(name, int(batch), num=num, n0=n0, input_size=size))
  if "lease" in chosen:
    res["lease"] = lease_dry_run(LEASE_SMOKE)
  res["seconds"] = time.perf_counter() - started
  for key in chosen:  # the figures (RESULTS.md's tables are made from the JSON)
    print(f"{key}: {jsonlib.dumps(res[key], default=str)[:4000]}", flush=True)
  print(f"levers: {res['seconds']:.0f} s")
  dump_json(json, res)
  return res
