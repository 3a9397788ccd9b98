"""Scaling over (forced) CPU devices: same counts, throughput per device count.

For each device count k, a fresh subprocess runs with
``XLA_FLAGS=--xla_force_host_platform_device_count=k`` and times
``rsjax.sample_counts`` on the same inputs with the same key. The engine spreads
the samples of each input over all local devices (``shard_map``), so the counts
must be identical for every k; the throughput shows what the extra devices buy.
On a 2-core machine, more than 2 CPU devices cannot help.

Command::

  python -m benchmarks.scaling --model lenet --num 20000 --devices 1,2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def _worker(args) -> None:
  import jax
  import numpy as np

  import rsjax
  from benchmarks.measure import SPECS
  from rsjax import models

  spec = SPECS[args.model]
  model = models.create_model(
    spec.name, num_classes=spec.num_classes, input_shape=spec.input_shape, rngs=0
  )
  apply_fn, variables = models.to_apply_fn(model)
  x = np.random.default_rng(0).random((args.inputs,) + spec.input_shape, dtype=np.float32)

  def run():
    return rsjax.sample_counts(
      jax.random.key(7),
      apply_fn,
      variables,
      x,
      sigma=0.25,
      num_classes=spec.num_classes,
      num=args.num,
      batch_size=args.batch_size,
    )  # NumPy: already synced

  counts = np.asarray(run())  # compile + warm-up
  times = []
  for _ in range(args.reps):
    t = time.perf_counter()
    run()
    times.append(time.perf_counter() - t)
  print(
    json.dumps(
      {
        "devices": len(jax.local_devices()),
        "counts": counts.tolist(),
        "samples_per_s": args.inputs * args.num / min(times),
      }
    ),
    flush=True,
  )


def measure(
  model: str,
  num: int,
  devices: list[int],
  *,
  inputs: int = 1,
  batch_size: int = 500,
  reps: int = 2,
  timeout: float = 600.0,
) -> list[dict]:
  """Runs one subprocess per device count; returns their JSON results."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  out = []
  for k in devices:
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    flags = [
      f
      for f in env.get("XLA_FLAGS", "").split()
      if not f.startswith("--xla_force_host_platform_device_count")
    ]
    env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={k}"])
    cmd = [
      sys.executable,
      "-m",
      "benchmarks.scaling",
      "--worker",
      "--model",
      model,
      "--num",
      str(num),
      "--inputs",
      str(inputs),
      "--batch-size",
      str(batch_size),
      "--reps",
      str(reps),
    ]
    proc = subprocess.run(
      cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
      raise RuntimeError(f"worker with {k} devices failed:\n{proc.stderr[-3000:]}")
    out.append(json.loads(proc.stdout.strip().splitlines()[-1]))
  return out


def main(argv=None) -> list[dict]:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--model", default="lenet")
  p.add_argument("--num", type=int, default=20_000)
  p.add_argument("--inputs", type=int, default=1, help="inputs per call")
  p.add_argument("--devices", default="1,2", help="comma-separated CPU device counts")
  p.add_argument("--batch-size", type=int, default=500)
  p.add_argument("--reps", type=int, default=2)
  p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.worker:
    _worker(args)
    return []
  ks = [int(k) for k in args.devices.split(",")]
  res = measure(
    args.model, args.num, ks, inputs=args.inputs, batch_size=args.batch_size, reps=args.reps
  )
  base = res[0]["samples_per_s"]
  same = all(r["counts"] == res[0]["counts"] for r in res)
  print(
    f"# scaling: {args.model}, {args.inputs} input(s) x N = {args.num}, batch {args.batch_size}"
  )
  print("| CPU devices | samples/s | speed-up | counts identical to 1st |")
  print("|---|---|---|---|")
  for r in res:
    print(
      f"| {r['devices']} | {r['samples_per_s']:.0f} | {r['samples_per_s'] / base:.2f} | "
      f"{r['counts'] == res[0]['counts']} |"
    )
  print(f"counts identical across device counts: {same}")
  if not same:
    sys.exit("counts differ across device counts")
  return res


if __name__ == "__main__":
  main()
