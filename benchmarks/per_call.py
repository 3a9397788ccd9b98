"""Fixed cost of one ``rsjax.certify`` call on one image, and where it goes.

A small model (random weights, ``rsjax.models``) and few samples make the
arithmetic negligible, so what is timed is the per-call cost that does not
shrink with the model: Python, argument checks, key handling, batch planning,
placement of the inputs, program dispatch, the wait and the transfer of the
counts, the Clopper-Pearson bound and radius on the host. After warm-up calls
(compilation) it reports, per call:

* wall-clock (best and median of ``--reps``) and CPU time (``time.process_time``,
  all threads; less sensitive to other processes on a shared machine);
* the engine programs of the call alone, replayed on their placed inputs (the
  floor), and the call's fixed cost: best call minus that floor;
* the programs compiled and the host waits (``jax.device_get`` calls) of one
  warm call (the design: none compiled, one wait);
* a breakdown by phase from ``cProfile`` (the profiler slows Python down, so the
  phases add up to more than the unprofiled call; compare them to each other).

Nothing is asserted (``tests/test_per_call.py`` guards the properties without
timing). Commands::

  python -m benchmarks.per_call                       # LeNet, n0 100, N 100, batch auto
  python -m benchmarks.per_call --model mlp --num 1000 --reps 50
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import pstats
import statistics
import time

import jax
import numpy as np
from jax import monitoring

import rsjax
from benchmarks.common import dump_json
from benchmarks.measure import SPECS, environment
from rsjax import models
from rsjax.engine import counts as counts_lib

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


def run(
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


def main(argv=None) -> dict:
  p = argparse.ArgumentParser(
    description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
  )
  p.add_argument("--model", default="lenet", choices=sorted(SPECS))
  p.add_argument("--n0", type=int, default=100)
  p.add_argument("--num", type=int, default=100, help="estimation samples N")
  p.add_argument("--batch-size", default="auto", help="forward batch, or auto")
  p.add_argument("--reps", type=int, default=30, help="timed calls (best and median reported)")
  p.add_argument("--profile-calls", type=int, default=30, help="calls under cProfile")
  p.add_argument("--json", default=None)
  a = p.parse_args(argv)
  batch = a.batch_size if a.batch_size == "auto" else int(a.batch_size)
  env = environment(())
  print(
    f"per-call cost: {env['cpu']}, {env['cores']} cores, jax {env['jax']}, "
    f"load {env['load_avg_1m']}"
  )
  row = run(
    a.model, n0=a.n0, num=a.num, batch_size=batch, reps=a.reps, profile_calls=a.profile_calls
  )
  dump_json(a.json, {"environment": env, "result": row})
  return row


if __name__ == "__main__":
  main()
