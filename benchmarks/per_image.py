"""Per-image cost of rsjax over (model, images per call, batch size), against a per-image loop.

For each model (random weights, ``rsjax.models``) and forward batch, one process
times, repetition by repetition and alternating (so load from other processes
hits every configuration alike):

* rsjax on ``k`` images in one call, for each ``k`` of ``--images``
  (``rsjax.sample_counts`` with ``--mode counts``; ``rsjax.certify``, n0 then N,
  with ``--mode certify``), divided by ``k``;
* the same forward pass in Cohen et al.'s per-image loop, written in plain JAX
  (``benchmarks.reference_jax``: a jitted noise + forward + argmax per batch, a
  host loop over the batches, host counting), on ``--reference-images`` images.

It reports the best repetition of each (and the median, in the JSON) as seconds
per image, wall-clock and CPU (``time.process_time``: all threads of the
process; on a machine shared with other jobs the wall clock measures the load
as much as the program, the CPU time much less so), with two ratios for each:
``vs 1 image`` (rsjax's per-image cost with ``k`` images per call over its cost
with one; 1.00 is the goal, below 1 is better) and ``reference / rsjax`` (above
1: rsjax is faster than the per-image loop).
Nothing is asserted: ``tests/test_benchmarks_smoke.py`` runs it at a tiny size so
that it cannot rot, and RESULTS.md records the full table.

Commands::

  python -m benchmarks.per_image                     # MLP, LeNet (N 10,000), ResNet-20 (N 1,000)
  python -m benchmarks.per_image --mode certify --models mlp,lenet --images 1,6
  python -m benchmarks.per_image --models lenet --batch-sizes 400,1000 --json out.json
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np

import rsjax
from benchmarks.common import dump_json
from benchmarks.measure import SPECS, environment, timed
from benchmarks.reference_jax import ReferenceLoop
from rsjax import models

SIGMA = 0.25
ALPHA = 0.001
# Samples per image and forward batches per model when not given: the issue-44
# workloads (N = 10,000 for the MNIST models; ResNet-20 at N = 1,000 on a CPU).
DEFAULT_NUM = {"mlp": 10_000, "cnn": 10_000, "lenet": 10_000, "resnet20": 1_000}
DEFAULT_BATCHES = {"mlp": (400, 1000), "cnn": (400, 1000), "lenet": (400, 1000), "resnet20": (256,)}


def run_model(
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


def _ints(text: str) -> list[int]:
  return [int(t) for t in text.split(",") if t.strip()]


def main(argv=None) -> list[dict]:
  p = argparse.ArgumentParser(
    description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
  )
  p.add_argument(
    "--models", default="mlp,lenet,resnet20", help=f"comma-separated, of {sorted(DEFAULT_NUM)}"
  )
  p.add_argument(
    "--images",
    default="1,2,6,16,32",
    help="images per rsjax call (the first should be 1: the ratios are to it)",
  )
  p.add_argument(
    "--batch-sizes",
    default=None,
    help="forward batches, comma-separated (default per model: "
    "400,1000 for MNIST models, 256 for ResNet-20)",
  )
  p.add_argument(
    "--num", type=int, default=None, help="samples per image (default 10,000; ResNet-20 1,000)"
  )
  p.add_argument(
    "--mode",
    choices=("counts", "certify"),
    default="counts",
    help="time rsjax.sample_counts (N samples), or rsjax.certify (n0 then N) "
    "against the reference's certify",
  )
  p.add_argument("--n0", type=int, default=100, help="selection samples (--mode certify)")
  p.add_argument("--reps", type=int, default=3, help="timed repetitions (best is reported)")
  p.add_argument(
    "--reference-images", type=int, default=2, help="images of the per-image loop per repetition"
  )
  p.add_argument("--json", default=None, help="write the rows and the environment as JSON")
  args = p.parse_args(argv)
  images = _ints(args.images)
  env = environment(())
  print(
    f"per-image cost, {args.mode}: {env['cpu']}, {env['cores']} cores, jax {env['jax']}, "
    f"load {env['load_avg_1m']}"
  )
  print(table([]))
  rows = []
  for name in [m for m in args.models.split(",") if m]:
    if name not in DEFAULT_NUM:
      p.error(f"--models: unknown model {name!r}; choose from {sorted(DEFAULT_NUM)}")
    batches = _ints(args.batch_sizes) if args.batch_sizes else DEFAULT_BATCHES[name]
    for bs in batches:
      rows += run_model(
        name,
        num=args.num or DEFAULT_NUM[name],
        n0=args.n0,
        batch_size=bs,
        images=images,
        reps=args.reps,
        reference_images=args.reference_images,
        mode=args.mode,
      )
  dump_json(args.json, {"environment": env, "results": rows})
  return rows


if __name__ == "__main__":
  main()
