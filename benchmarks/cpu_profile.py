"""A profile of the sampling loop on the CPU, per model, rsjax beside its PyTorch twin (issue 66,
item 1): ``python -m benchmarks.run --config benchmarks/configs/cpu_profile.py``.

Per model (random weights, one input, sigma 0.25) and batch ``b``, every figure in milliseconds
per 1000 samples, min / median / max over alternated rounds (``benchmarks.cpu_variants.alternate``:
every arm of a batch once per round, in turn):

* rsjax, through the engine's own functions (``rsjax.engine.step``, traced at the engine's
  float32 matmul precision): ``noise`` (``draw_step``: Threefry words, ``erf_inv``, x + sigma
  eps; ``noise_fast``: the same with ``gaussian_fast``'s 13-round stream), ``forward``
  (``drawn_logits`` on a drawn batch), ``count`` (``class_counts``: argmax, finite check,
  histogram), ``step`` (the three as one jitted program), ``pass`` and ``pass1``
  (``rsjax.sample_counts`` of ``steps * b`` and of ``b`` samples) and ``program`` (the engine's
  compiled loop, ``rsjax.engine.counts._counts_jit``, called directly on placed inputs).
  Derived: ``parts`` = noise + forward + count; ``step - parts`` (what compiling them together
  gains or loses: fusion); ``loop step`` = the slope of the pass over its steps, ``fixed ms`` =
  its intercept (one call's cost beyond its steps); ``host ms`` = pass - program (input checks,
  placement, dispatch, reading the counts); ``pass - step`` (loop and host overhead per 1000).
* the twin (``rsjax.app.bench.twin``: the same weights, channels-last), eager and under
  ``torch.compile`` (``compiled_twin``, static shapes, compiled for every batch before timing),
  at each of ``torch_threads``: ``noise`` (``torch.randn`` as ``tuned_counts`` draws it, plus
  its add), ``forward``, ``count`` (argmax + ``scatter_add_``), ``step`` (one iteration of
  ``tuned_counts``' loop) and ``pass`` (``tuned_counts`` of ``steps * b`` samples).

Then (``sections``): XLA's own breakdown of the forward, the jitted step and the engine's loop
by kind of work (``benchmarks.cpu_breakdown.xla_breakdown``), LeNet cut at its layers against
the twin's (``lenet_layers``), and the A/B variants of ``benchmarks.cpu_variants`` (XLA flags,
NHWC/NCHW, im2col, bfloat16, and the library's own batch norm folding and narrow-stage
packing for the ResNets). The machine and its load average at the start and the end are
written with the figures. ``benchmarks.cpu_report`` renders RESULTS.md's tables from the JSON.
"""

from __future__ import annotations

import json as jsonlib
import os
import sys
import time

import numpy as np

try:
  import torch
except ImportError:  # benchmark-only extra
  torch = None

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import rsjax  # noqa: E402
from benchmarks import cpu_breakdown, cpu_variants, measure  # noqa: E402
from benchmarks.cpu_report import report, table  # noqa: E402
from benchmarks.cpu_variants import Arm, alternate, aot  # noqa: E402
from rsjax import models as rsjax_models  # noqa: E402
from rsjax import noise as noise_lib  # noqa: E402
from rsjax.app.bench import machine  # noqa: E402
from rsjax.engine import counts as engine_counts  # noqa: E402
from rsjax.engine import precision as precision_lib  # noqa: E402
from rsjax.engine import step as engine_step  # noqa: E402
from rsjax.util import local_mesh, replicate  # noqa: E402

__all__ = ["SECTIONS", "cpu_profile", "derive", "profile_model", "table"]

SIGMA = 0.25
SECTIONS = ("profile", "breakdown", "layers", "flags", "layouts", "im2col", "dtypes", "levers")
BATCHES = {"lenet": [64, 256, 1000], "resnet20": [64, 256, 512], "resnet110": [64, 256, 512]}
STEPS = {"lenet": 8, "resnet20": 2, "resnet110": 2}


def _argv() -> list[str]:
  """The command line, paths inside the repository relative to it (no machine's paths)."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
  return [a.replace(root, "") for a in sys.argv]


def _sync(x):
  return jax.block_until_ready(x)


def _engine_program(apply_fn, variables, x, batch: int, num: int, num_classes: int):
  """The engine's compiled loop for ``num`` samples of ``x`` at ``batch``, its inputs placed as
  ``dispatch_counts`` places them: ``(run(), compiled program text)``."""
  xs, sig, ids = engine_counts.prepare_inputs(x, SIGMA, None)
  noise = noise_lib.get_noise(None).bind(xs, sig)
  plan = engine_step.make_chunk_plan(xs.shape[0], num, batch, 1)
  mesh = local_mesh(1)
  args = replicate(mesh, (jax.random.key(1), variables, xs, sig, ids))
  kw = dict(apply_fn=apply_fn, noise=noise, num_classes=num_classes, plan=plan, mesh=mesh)
  with precision_lib.context("float32"):
    compiled = engine_counts._counts_jit.lower(*args, compute_dtype=None, **kw).compile()
  return (lambda: _sync(compiled(*args))), compiled.as_text()


def _rsjax_arms(apply_fn, variables, x, batch: int, steps: int, num_classes: int) -> tuple:
  """rsjax's arms at ``batch`` (see the module doc) and ``{program: (run, text, samples)}`` for
  the XLA breakdown."""
  xs, sig, _ = engine_counts.prepare_inputs(x, SIGMA, None)
  noise = noise_lib.get_noise(None).bind(xs, sig)
  plan = engine_step.make_chunk_plan(1, steps * batch, batch, 1)
  x_g, s_g, i_g = jnp.asarray(xs), jnp.asarray(sig), jnp.zeros((1,), jnp.uint32)
  key, chunk = jax.random.key(1), jnp.uint32(0)

  def draw(key, chunk):
    return engine_step.draw_step(noise, plan, key, x_g, s_g, i_g, chunk)

  def forward(v, xn, ok):
    return engine_step.drawn_logits(apply_fn, v, num_classes, xn, ok, None)[0]

  def step(v, key, chunk):
    xn, ok = draw(key, chunk)
    return engine_step.class_counts(forward(v, xn, ok), ok, num_classes)

  fast = noise_lib.get_noise("gaussian_fast").bind(xs, sig)
  draw_j = aot(draw, key, chunk)
  fast_j = aot(lambda k, c: engine_step.draw_step(fast, plan, k, x_g, s_g, i_g, c), key, chunk)
  xn, ok = draw_j(key, chunk)
  fwd_j = aot(forward, variables, xn, ok)
  logits = fwd_j(variables, xn, ok)
  count_j = aot(lambda logits, ok: engine_step.class_counts(logits, ok, num_classes), logits, ok)
  step_j = aot(step, variables, key, chunk)
  program, program_text = _engine_program(apply_fn, variables, x, batch, steps * batch, num_classes)

  def sample_counts(num):
    return lambda: rsjax.sample_counts(
      key, apply_fn, variables, x, sigma=SIGMA, num_classes=num_classes, num=num, batch_size=batch
    )

  arms = {
    "noise": Arm(lambda: _sync(draw_j(key, chunk)), batch),
    "noise_fast": Arm(lambda: _sync(fast_j(key, chunk)), batch),
    "forward": Arm(lambda: _sync(fwd_j(variables, xn, ok)), batch),
    "count": Arm(lambda: _sync(count_j(logits, ok)), batch),
    "step": Arm(lambda: _sync(step_j(variables, key, chunk)), batch),
    "pass1": Arm(sample_counts(batch), batch),
    "pass": Arm(sample_counts(steps * batch), steps * batch),
    "program": Arm(program, steps * batch),
  }
  programs = {
    "forward": (arms["forward"].fn, fwd_j.as_text(), batch),
    "step": (arms["step"].fn, step_j.as_text(), batch),
    "engine loop": (program, program_text, steps * batch),
  }
  return arms, programs


def _twin_arms(module, x, batch: int, steps: int, threads: int, num_classes: int) -> dict:
  """The twin's arms (see the module doc) for ``module`` (eager or compiled) at ``threads``."""
  from rsjax.app.bench import twin

  dev = torch.device("cpu")
  xt = twin._torch_input(x[0], dev)
  gen = torch.Generator().manual_seed(0)
  shape = (batch,) + tuple(xt.shape)
  ones = torch.ones(batch, dtype=torch.int64)
  counts = torch.zeros(num_classes, dtype=torch.int64)
  with twin._forward_context(dev, "fp32"):
    noisy = twin._noisy_batch(xt, torch.randn(shape, generator=gen), SIGMA)
    logits = module(noisy)

  def ctx(fn):
    def run():
      with twin._forward_context(dev, "fp32"):
        return fn()

    return run

  def step():
    pred = module(twin._noisy_batch(xt, torch.randn(shape, generator=gen), SIGMA)).argmax(1)
    counts.scatter_add_(0, pred, ones)

  def full():
    twin.tuned_counts(
      module, x[0], steps * batch, batch, sigma=SIGMA, num_classes=num_classes, generator=gen
    )

  def setup():
    torch.set_num_threads(threads)

  return {
    "noise": Arm(
      ctx(lambda: twin._noisy_batch(xt, torch.randn(shape, generator=gen), SIGMA)), batch, setup
    ),
    "forward": Arm(ctx(lambda: module(noisy)), batch, setup),
    "count": Arm(ctx(lambda: counts.scatter_add_(0, logits.argmax(1), ones)), batch, setup),
    "step": Arm(ctx(step), batch, setup),
    "pass": Arm(full, steps * batch, setup),
  }


def derive(times: dict, batch: int, steps: int) -> dict:
  """The derived figures of one side at one batch from its arms' medians (see the module doc)."""
  m = {k: v["median"] for k, v in times.items()}
  out = {"parts": m["noise"] + m["forward"] + m["count"]}
  out["step - parts"] = m["step"] - out["parts"]
  out["pass - step"] = m["pass"] - m["step"]
  if "pass1" in m:  # rsjax: the pass's slope and intercept, the host's share
    slope = (m["pass"] * steps - m["pass1"]) / (steps - 1) if steps > 1 else float("nan")
    out["loop step"] = slope
    out["fixed ms"] = (m["pass1"] - slope) * batch / 1000
    out["host ms"] = (m["pass"] - m["program"]) * steps * batch / 1000
  return out


def _twins(model, spec, apply_fn, variables, batches, compile_mode: str) -> dict:
  """The eager twin and, unless ``compile_mode`` is "none", the compiled one; the logits check."""
  from rsjax.app.bench import twin
  from rsjax.app.bench.torch_models import check_same_logits

  # Dynamo keeps compiled code per Python function (the twins' forward methods), 8 versions at
  # most: the models and batches before this one would push this model's back to eager.
  torch._dynamo.reset()
  torch._dynamo.utils.counters.clear()
  eager, _ = twin.tuned_module(model, spec.input_shape)
  rng = np.random.default_rng(1)
  noisy = rng.random((4,) + spec.input_shape, dtype=np.float32)
  out = {"eager": eager, "logits": check_same_logits(eager, apply_fn, variables, noisy)}
  if compile_mode != "none":
    c = twin.compiled_twin(eager, spec.input_shape, modes=compile_mode, batch_sizes=batches)
    out["compile"] = {"mode": c["mode"], "compile_s": c["compile_s"], "tried": c["tried"]}
    if c["mode"] is not None:
      out["compiled"] = c["module"]
  return out


def profile_model(
  name: str, *, batches, steps: int, rounds: int, min_s: float, torch_threads, twin_compile: str,
  trace_batch: int | None, trace_calls: int, seed: int = 0,
) -> dict:  # fmt: skip
  """Every figure of one model (see the module doc)."""
  spec = measure.SPECS[name]
  model = rsjax_models.create_model(
    name, num_classes=spec.num_classes, input_shape=spec.input_shape, rngs=seed
  )
  apply_fn, variables = rsjax_models.to_apply_fn(model)
  x = np.random.default_rng(seed).random((1,) + spec.input_shape, dtype=np.float32)
  out = {"input_shape": list(spec.input_shape), "steps": steps, "batches": {}}
  out["gflop_per_sample"] = measure.forward_flops(apply_fn, variables, spec.input_shape) / 1e9
  twins = _twins(model, spec, apply_fn, variables, batches, twin_compile) if torch else {}
  out["twin"] = {k: v for k, v in twins.items() if k in ("logits", "compile")}
  if "compiled" in twins:  # one graph a batch size, none fallen back to eager
    graphs = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    out["twin"]["compile"]["graphs"] = graphs
    if graphs < len(batches):
      raise RuntimeError(f"{name}: {graphs} compiled graphs for {len(batches)} batch sizes")
  for b in batches:
    print(f"[cpu_profile] {name} batch {b}, load {os.getloadavg()[0]:.2f}", flush=True)
    arms, programs = _rsjax_arms(apply_fn, variables, x, b, steps, spec.num_classes)
    arms = {f"rsjax/{k}": v for k, v in arms.items()}
    for side in ("eager", "compiled"):
      for t in torch_threads if side in twins else ():
        twin_arms = _twin_arms(twins[side], x, b, steps, int(t), spec.num_classes)
        arms.update({f"{side}@{t}/{k}": v for k, v in twin_arms.items()})
    times = alternate(arms, rounds, min_s)
    row = {"steps": steps, "samples_per_pass": steps * b, "sides": {}}
    for key in dict.fromkeys(k.split("/")[0] for k in times):
      side_times = {k.split("/")[1]: v for k, v in times.items() if k.startswith(key + "/")}
      row["sides"][key] = {"times": side_times, "derived": derive(side_times, b, steps)}
    out["batches"][str(b)] = row
    if b == trace_batch:
      out["xla_breakdown"] = {
        "batch": b,
        **{p: cpu_breakdown.xla_breakdown(fn, text, n, trace_calls)
           for p, (fn, text, n) in programs.items()},
      }  # fmt: skip
  return out


def _load() -> list[float]:
  return list(os.getloadavg()) if hasattr(os, "getloadavg") else []


def cpu_profile(
  *,
  models: list[str] | str = ("lenet", "resnet20", "resnet110"),
  batches: dict | None = None,
  steps: dict | None = None,
  rounds: int = 3,
  min_s: float = 0.2,
  torch_threads=(1, 2),
  twin_compile: str = "default",
  trace_batch: dict | None = None,
  trace_calls: int = 2,
  sections=SECTIONS,
  variant_batch: int = 256,
  flag_models=("resnet20", "lenet"),
  flag_variants=None,
  flag_rounds: int = 5,
  lever_models=("resnet20", "resnet110"),
  update: bool = False,
  json: str | None = None,
) -> dict:
  """The CPU profile of the sampling loop (see the module doc); writes ``json``.

  ``torch_threads``: the twin's thread counts, each timed (a list, or ``{model: list}``,
  ``[1]`` for a model it leaves out); the table shows the faster. ``flag_rounds``: at least
  that many rounds of the XLA flags (warm workers make a round cheap; the variants differ
  little). ``update``: keep the figures of an existing ``json`` and replace only the sections
  run now (``--set args.sections=levers --set args.update=true``), the run recorded under
  ``"updates"`` (its command, machine, load and seconds).
  """
  names = models.split(",") if isinstance(models, str) else list(models)
  sections = sections.split(",") if isinstance(sections, str) else list(sections)
  batches = {**BATCHES, **(batches or {})}
  steps = {**STEPS, **(steps or {})}
  trace_batch = {"lenet": 1000, "resnet20": 256, "resnet110": 256, **(trace_batch or {})}
  if torch is not None:
    torch.set_num_threads(os.cpu_count() or 1)
  record = {"argv": _argv(), "sections": sections, "load_avg_start": _load()}
  updating = bool(update and json and os.path.exists(json))
  doc = {
    "argv": _argv(),
    "args": {
      "models": names,
      "batches": {n: batches[n] for n in names},
      "rounds": rounds,
      "min_s": min_s,
      "torch_threads": torch_threads,
      "twin_compile": twin_compile,
      "sections": sections,
      "variant_batch": variant_batch,
    },
    "machine": machine.environment(),
    "load_avg_start": record["load_avg_start"],
    "units": "ms per 1000 samples (min / median / max over rounds) unless named otherwise",
    "models": {},
  }
  if updating:  # the file's figures stay; this run's sections replace theirs
    record["machine"] = doc["machine"]
    with open(json, encoding="utf-8") as fh:
      doc = jsonlib.load(fh)
    doc.setdefault("updates", []).append(record)
  t0 = time.perf_counter()
  if "profile" in sections:
    for name in names:
      threads = torch_threads.get(name, [1]) if isinstance(torch_threads, dict) else torch_threads
      doc["models"][name] = profile_model(
        name, batches=batches[name], steps=int(steps[name]), rounds=rounds, min_s=min_s,
        torch_threads=threads, twin_compile=twin_compile, trace_calls=trace_calls,
        trace_batch=trace_batch.get(name) if "breakdown" in sections else None,
      )  # fmt: skip
      measure.dump_json(json, doc)
  kw = dict(rounds=rounds, min_s=min_s)
  variants = {
    "layers": lambda: cpu_breakdown.lenet_layers(batch=max(batches["lenet"]), **kw),
    "flags": lambda: cpu_variants.xla_flags(
      flag_models,
      batch=variant_batch,
      rounds=max(rounds, flag_rounds),
      min_s=max(min_s, 0.5) if min_s else 0.0,
      variants=[
        v for v in cpu_variants.FLAG_VARIANTS if flag_variants is None or v[0] in flag_variants
      ],
    ),
    "layouts": lambda: cpu_variants.layouts(batch=variant_batch, **kw),
    "im2col": lambda: cpu_variants.im2col(batch=max(batches["lenet"]), **kw),
    "dtypes": lambda: cpu_variants.dtypes(names, batch=variant_batch, **kw),
    "levers": lambda: cpu_variants.levers(lever_models, batch=variant_batch, **kw),
  }
  for key, fn in variants.items():
    if key in sections:
      print(f"[cpu_profile] {key}, load {os.getloadavg()[0]:.2f}", flush=True)
      doc[key] = fn()
      measure.dump_json(json, doc)
  (record if updating else doc).update(load_avg_end=_load(), seconds=time.perf_counter() - t0)
  measure.dump_json(json, doc)
  print(report(doc))
  return doc
