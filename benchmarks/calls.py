"""What one ``rsjax.certify`` call costs beyond its arithmetic, and what k images in one call
cost against k calls and Cohen et al.'s per-image loop.

:func:`per_call`: a small model (random weights) and few samples make the arithmetic negligible,
so what is timed is the per-call cost that does not shrink with the model (Python, argument
checks, keys, batch planning, placement, dispatch, the wait and transfer of the counts, the
bound and radius on the host). After warm-up calls, per call: wall (best and median) and CPU
time; the call's engine programs alone, replayed on their placed inputs (the floor), and the
fixed cost (best call minus the floor); the programs compiled and the host waits of one warm
call (the design: none compiled, one wait); a breakdown by phase under ``cProfile`` (slower
than the unprofiled call: compare the phases to each other). ``tests/test_per_call.py`` guards
the properties without timing.

:func:`per_image`: per model and forward batch, alternating repetition by repetition, rsjax on
``k`` images in one call (``sample_counts``, or ``certify`` with ``mode="certify"``) divided by
``k``, and the same forward pass in the per-image loop in plain JAX
(``benchmarks.twins.ReferenceLoop``). Seconds per image, wall and CPU, and two ratios:
``vs 1 image`` (1.00 is the goal, below is better) and ``reference / rsjax``. Nothing is
asserted; ``tests/test_benchmarks_smoke.py`` runs it at a tiny size.
"""

from __future__ import annotations

import contextlib
import cProfile
import pstats
import statistics
import time

import jax
import numpy as np
from jax import monitoring

import rsjax
from benchmarks.measure import SPECS, dump_json, environment, timed
from benchmarks.twins import ReferenceLoop
from rsjax import models
from rsjax.engine import counts as counts_lib

__all__ = ["PHASES", "call_row", "image_rows", "per_call", "per_image"]

#: Phase -> function names (as cProfile records them) whose cumulative time it is.
PHASES = {
  "argument checks": ("refuse_traced", "prepare_inputs", "of", "scale_per_input"),
  "keys (as_key, fold_in)": ("as_key", "fold_in", "fold_keys"),
  "batch size (auto_batch_size)": ("auto_batch_size",),
  "placement (device_put)": ("replicate",),
  "dispatch of the passes (all)": ("dispatch_counts",),
  "wait + device->host": ("device_get",),
  "certificate (bound, radius)": ("certificate_from_counts",),
  "total (rsjax.certify)": ("certify",),
}


def _phase_times(stats: pstats.Stats, calls: int) -> dict[str, float]:
  """Seconds per call of each phase: the largest cumulative time of its functions,
  summed over distinct names (a name appearing at several places: the outermost)."""
  raw = stats.stats  # type: ignore[attr-defined]
  out = {}
  for phase, names in PHASES.items():
    total = 0.0
    for name in names:
      cts = [v[3] for (_, _, fn), v in raw.items() if fn == name]
      total += max(cts, default=0.0)
    out[phase] = total / calls
  return out


@contextlib.contextmanager
def _counting():
  """Counts compile events and ``jax.device_get`` calls inside the block."""
  seen = {"compiles": 0, "traces": 0, "device_get": 0}

  def on_event(name, *_, **__):
    if name == "/jax/core/compile/backend_compile_duration":
      seen["compiles"] += 1
    elif name == "/jax/core/compile/jaxpr_trace_duration":
      seen["traces"] += 1

  monitoring.register_event_duration_secs_listener(on_event)
  real = jax.device_get

  def counted(x):
    if any(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(x)):
      seen["device_get"] += 1
    return real(x)

  jax.device_get = counted
  try:
    yield seen
  finally:
    jax.device_get = real
    monitoring.unregister_event_duration_listener(on_event)


def _program_floor(call, reps: int) -> float:
  """Best seconds of the engine programs of one call alone: each launch of
  ``rsjax.engine.counts._counts_jit`` that ``call`` makes is recorded with its
  (already placed) arguments and replayed back to back, waiting for the last."""
  real = counts_lib._counts_jit
  launches = []

  def record(*args, **kwargs):
    launches.append((args, kwargs))
    return real(*args, **kwargs)

  counts_lib._counts_jit = record
  try:
    call()
  finally:
    counts_lib._counts_jit = real
  best = float("inf")
  for _ in range(reps):
    t0 = time.perf_counter()
    jax.block_until_ready([real(*a, **k) for a, k in launches])
    best = min(best, time.perf_counter() - t0)
  return best


def call_row(
  model: str, *, n0: int, num: int, batch_size, reps: int, profile_calls: int, log=print
) -> dict:
  """Times ``rsjax.certify`` of one image; returns the row (seconds per call)."""
  spec = SPECS[model]
  m = models.create_model(model, num_classes=spec.num_classes, input_shape=spec.input_shape, rngs=0)
  apply_fn, params = models.to_apply_fn(m)
  x = np.random.default_rng(0).random((1,) + spec.input_shape, dtype=np.float32)

  def call(seed: int):
    return rsjax.certify(
      seed,
      apply_fn,
      params,
      x,
      sigma=0.25,
      num_classes=spec.num_classes,
      n0=n0,
      n=num,
      batch_size=batch_size,
    )

  for s in range(3):
    call(s)
  with _counting() as seen:
    call(3)
  floor = _program_floor(lambda: call(4), reps)
  wall, cpu = [], []
  for r in range(reps):
    t0, c0 = time.perf_counter(), time.process_time()
    call(r)
    wall.append(time.perf_counter() - t0)
    cpu.append(time.process_time() - c0)
  prof = cProfile.Profile()
  prof.enable()
  for r in range(profile_calls):
    call(r)
  prof.disable()
  phases = _phase_times(pstats.Stats(prof), profile_calls)
  row = {
    "model": model,
    "n0": n0,
    "num": num,
    "batch_size": batch_size,
    "wall_s_best": min(wall),
    "wall_s_median": statistics.median(wall),
    "cpu_s_best": min(cpu),
    "programs_s_best": floor,
    "fixed_s_best": min(wall) - floor,
    "warm_call_compiles": seen["compiles"],
    "warm_call_traces": seen["traces"],
    "warm_call_device_gets": seen["device_get"],
    "phases_s_profiled": phases,
  }
  log(
    f"{model}, n0 {n0}, N {num}, batch {batch_size}: per call wall best "
    f"{1e3 * row['wall_s_best']:.2f} ms (median {1e3 * row['wall_s_median']:.2f}), CPU best "
    f"{1e3 * row['cpu_s_best']:.2f} ms; warm call: {seen['compiles']} compiles, "
    f"{seen['traces']} traces, {seen['device_get']} jax.device_get"
  )
  log(
    f"  the call's engine programs alone (replayed, placed inputs): {1e3 * floor:.2f} ms; "
    f"fixed cost (best call - programs): {1e3 * (min(wall) - floor):.2f} ms"
  )
  log(f"phases under cProfile ({profile_calls} calls), ms per call:")
  for k, v in phases.items():
    log(f"  {k:32s} {1e3 * v:7.2f}")
  return row


SIGMA = 0.25
ALPHA = 0.001
# Samples per image and forward batches per model when not given: the issue-44
# workloads (N = 10,000 for the MNIST models; ResNet-20 at N = 1,000 on a CPU).
DEFAULT_NUM = {"mlp": 10_000, "cnn": 10_000, "lenet": 10_000, "resnet20": 1_000}
DEFAULT_BATCHES = {"mlp": (400, 1000), "cnn": (400, 1000), "lenet": (400, 1000), "resnet20": (256,)}


def image_rows(
  name: str,
  *,
  num: int,
  n0: int,
  batch_size: int,
  images,
  reps: int,
  reference_images: int,
  mode: str,
  seed: int = 0,
  log=print,
) -> list[dict]:
  """Times one (model, batch size) over ``images``; returns one row per images-per-call."""
  spec = SPECS[name]
  model = models.create_model(
    name, num_classes=spec.num_classes, input_shape=spec.input_shape, rngs=seed
  )
  apply_fn, params = models.to_apply_fn(model)
  x = np.random.default_rng(seed).random((max(images),) + spec.input_shape, dtype=np.float32)
  ref = ReferenceLoop(
    apply_fn, params, num_classes=spec.num_classes, sigma=SIGMA, batch_size=batch_size
  )

  def run_rsjax(k):
    if mode == "certify":
      return rsjax.certify(
        seed,
        apply_fn,
        params,
        x[:k],
        sigma=SIGMA,
        num_classes=spec.num_classes,
        n0=n0,
        n=num,
        alpha=ALPHA,
        batch_size=batch_size,
      )
    return rsjax.sample_counts(
      seed,
      apply_fn,
      params,
      x[:k],
      sigma=SIGMA,
      num_classes=spec.num_classes,
      num=num,
      batch_size=batch_size,
    )

  def run_reference():
    for i in range(reference_images):
      key = jax.random.key(seed * 1_000_003 + i)
      if mode == "certify":
        ref.certify(key, x[i], n0=n0, n=num, alpha=ALPHA)
      else:
        ref.sample_noise(key, x[i], num)

  jobs = {k: (lambda k=k: run_rsjax(k)) for k in images}
  jobs["reference"] = run_reference
  per = {k: (k if k != "reference" else reference_images) for k in jobs}
  for fn in jobs.values():  # warm-up: compile every program
    timed(fn)
  wall, cpu = {k: [] for k in jobs}, {k: [] for k in jobs}
  for _ in range(reps):
    for k, fn in jobs.items():
      c0 = time.process_time()
      wall[k].append(timed(fn)[0] / per[k])
      cpu[k].append((time.process_time() - c0) / per[k])
  best, best_cpu = {k: min(v) for k, v in wall.items()}, {k: min(v) for k, v in cpu.items()}
  one = images[0] == 1
  rows = []
  for k in images:
    row = {
      "model": name,
      "mode": mode,
      "num": num,
      "n0": n0 if mode == "certify" else None,
      "batch_size": batch_size,
      "images_per_call": k,
      "rsjax_s_per_image": best[k],
      "rsjax_s_per_image_median": statistics.median(wall[k]),
      "rsjax_cpu_s_per_image": best_cpu[k],
      "reference_s_per_image": best["reference"],
      "reference_s_per_image_median": statistics.median(wall["reference"]),
      "reference_cpu_s_per_image": best_cpu["reference"],
      "vs_one_image": best[k] / best[1] if one else None,
      "vs_one_image_cpu": best_cpu[k] / best_cpu[1] if one else None,
      "reference_over_rsjax": best["reference"] / best[k],
      "reference_over_rsjax_cpu": best_cpu["reference"] / best_cpu[k],
    }
    rows.append(row)
  log(table(rows, header=False))
  return rows


def _fmt(v, spec):
  return "-" if v is None else spec.format(v)


def table(rows: list[dict], header: bool = True) -> str:
  """The rows as a Markdown table: seconds per image and the two ratios, wall (CPU)."""
  lines = []
  if header:
    lines += [
      "| model | mode | N | batch | images/call | rsjax s/image, wall (CPU) | "
      "vs 1 image, wall (CPU) | reference s/image, wall (CPU) | "
      "reference / rsjax, wall (CPU) |",
      "|---|---|---|---|---|---|---|---|---|",
    ]
  for r in rows:
    lines.append(
      f"| {r['model']} | {r['mode']} | {r['num']} | {r['batch_size']} | "
      f"{r['images_per_call']} | "
      f"{r['rsjax_s_per_image']:.4f} ({r['rsjax_cpu_s_per_image']:.4f}) | "
      f"{_fmt(r['vs_one_image'], '{:.2f}')} ({_fmt(r['vs_one_image_cpu'], '{:.2f}')}) | "
      f"{r['reference_s_per_image']:.4f} ({r['reference_cpu_s_per_image']:.4f}) | "
      f"{r['reference_over_rsjax']:.2f} ({r['reference_over_rsjax_cpu']:.2f}) |"
    )
  return "\n".join(lines)


def _ints(text: str | int) -> list[int]:
  return [int(t) for t in str(text).split(",") if t.strip()]


def per_call(
  *,
  model: str = "lenet",
  n0: int = 100,
  num: int = 100,
  batch_size: int | str = "auto",
  reps: int = 30,
  profile_calls: int = 30,
  json: str | None = None,
) -> dict:
  """The fixed cost of one ``rsjax.certify`` call of ``model`` on one image (see above)."""
  env = environment()
  print(f"per-call cost: {env['cpu']}, {env['cores']} cores, load {env['load_avg_1m']}")
  bs = batch_size if batch_size == "auto" else int(batch_size)
  row = call_row(model, n0=n0, num=num, batch_size=bs, reps=reps, profile_calls=profile_calls)
  dump_json(json, {"environment": env, "result": row})
  return row


def per_image(
  *,
  models: str = "mlp,lenet,resnet20",
  images: str = "1,2,6,16,32",
  batch_sizes: str | None = None,
  num: int | None = None,
  mode: str = "counts",
  n0: int = 100,
  reps: int = 3,
  reference_images: int = 2,
  json: str | None = None,
) -> list[dict]:
  """The issue-44 table over ``models``, ``images`` per call (the first 1: the ratios are to
  it) and ``batch_sizes`` (default per model: 400,1000 for MNIST models, 256 for ResNet-20);
  ``num`` samples per image (default 10,000, ResNet-20 1,000); ``mode`` "counts" or
  "certify"; ``reference_images`` images of the per-image loop per repetition."""
  if mode not in ("counts", "certify"):
    raise SystemExit(f"mode: 'counts' or 'certify', not {mode!r}")
  env = environment()
  print(f"per-image cost, {mode}: {env['cpu']}, {env['cores']} cores, load {env['load_avg_1m']}")
  print(table([]))
  rows = []
  for name in [m for m in models.split(",") if m]:
    if name not in DEFAULT_NUM:
      raise SystemExit(f"models: unknown model {name!r}; choose from {sorted(DEFAULT_NUM)}")
    for bs in _ints(batch_sizes) if batch_sizes else DEFAULT_BATCHES[name]:
      rows += image_rows(
        name, num=num or DEFAULT_NUM[name], n0=n0, batch_size=bs, images=_ints(images),
        reps=reps, reference_images=reference_images, mode=mode,
      )  # fmt: skip
  dump_json(json, {"environment": env, "results": rows})
  return rows
