"""Cost of one training step of each objective relative to Gaussian training, in one run.

Each objective trains LeNet on the first ``--inputs`` digits of the embedded
``mnist5k`` with ``rsjax.training.train`` for two epochs; the first epoch
includes compilation, the second is timed (its ``seconds`` in the history,
evaluation off). Objectives are run in turn, ``--repeats`` rounds, and the
fastest round of each counts, so that load from other processes hits all of
them alike. The ratio is the objective's epoch time divided by the time of
Gaussian training with the same number of noise draws ``m`` (and, in the
``vs m=1`` column, Cohen et al.'s single draw).

Usage::

  python -m benchmarks.objectives            # m = 4, batch 64 inputs, 1024 inputs
  python -m benchmarks.objectives --json out.json

Expected ordering: MACER and Consistency cost about a Gaussian step with the
same m (one forward/backward of B*m images plus cheap terms); SmoothAdv adds
``steps`` forward/backward passes of the attack; the sphere attack adds up to
``T`` passes (all T run under jit, frozen rows are masked, not skipped).
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

from benchmarks.common import dump_json
from rsjax import data, models, training


def objectives(m: int) -> dict:
  return {
    "gaussian m=1": training.Gaussian(num_noise=1),
    f"gaussian m={m}": training.Gaussian(num_noise=m),
    f"consistency m={m}": training.Consistency(num_noise=m),
    f"smoothadv m={m}, 2 steps": training.SmoothAdv(num_noise=m, steps=2, warmup=1),
    f"macer m={m}": training.MACER(num_noise=m),
    f"gaussian+sphere attack m={m}, T=4": training.Gaussian(
      num_noise=m, attack=training.SphereAttack(steps=4, step_size=0.25)
    ),
  }


def epoch_seconds(objective, x, y, batch: int) -> float:
  model = models.create_model("lenet", num_classes=10, input_shape=(28, 28, 1), rngs=0)
  cfg = training.TrainConfig(
    sigma=0.5, epochs=2, batch_size=batch, lr=0.01, objective=objective, drop_last=True
  )
  _, hist = training.train(jax.random.key(0), model, (x, y), cfg, progress=False)
  return float(hist[1]["seconds"])


def main(argv=None) -> dict:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--m", type=int, default=4, help="noise draws per input")
  p.add_argument("--batch", type=int, default=64, help="inputs per step")
  p.add_argument("--inputs", type=int, default=1024, help="training inputs (one epoch)")
  p.add_argument("--repeats", type=int, default=2)
  p.add_argument("--json", default=None)
  args = p.parse_args(argv)
  x, y = data.load("mnist5k", "train").arrays()
  x, y = x[: args.inputs], y[: args.inputs]
  objs = objectives(args.m)
  best = {name: float("inf") for name in objs}
  for r in range(args.repeats):
    for name, obj in objs.items():
      best[name] = min(best[name], epoch_seconds(obj, x, y, args.batch))
      print(f"round {r + 1}: {name}: {best[name]:.2f} s/epoch", flush=True)
  base_m = best[f"gaussian m={args.m}"]
  base_1 = best["gaussian m=1"]
  steps = args.inputs // args.batch
  print(
    f"\nLeNet, mnist5k, {args.inputs} inputs, batch {args.batch} inputs, {steps} steps/epoch, "
    f"best of {args.repeats} (device: {jax.devices()[0].platform})"
  )
  print(f"{'objective':38s} {'ms/step':>9s} {'vs gaussian m=' + str(args.m):>17s} {'vs m=1':>8s}")
  rows = {}
  for name, t in best.items():
    rows[name] = {
      "seconds_per_epoch": t,
      "ms_per_step": 1e3 * t / steps,
      "ratio_vs_gaussian_same_m": t / base_m,
      "ratio_vs_gaussian_m1": t / base_1,
    }
    print(f"{name:38s} {1e3 * t / steps:9.1f} {t / base_m:17.2f} {t / base_1:8.2f}")
  out = {"config": vars(args), "objectives": rows, "time": time.strftime("%Y-%m-%d %H:%M")}
  dump_json(args.json, out)
  return out


if __name__ == "__main__":
  np.set_printoptions(precision=3)
  main()
