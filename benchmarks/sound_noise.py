"""The cost of sound 8-bit noise (``gaussian_8bit``) against the float Gaussian, in one run.

Two parts, both side by side in one process:

* **speed**: samples per second of ``rsjax.sample_counts`` with ``noise="gaussian"`` and
  ``noise="gaussian_8bit"`` on the MLP, LeNet (28x28x1) and ResNet-20 (32x32x3), random
  weights, one 8-bit input, sigma 0.25; the two noises alternate repetition by repetition
  after a warm-up (compile) and the best repetition of each is reported with the ratio
  ``sound / float`` of the rates (below 1: the sound noise is slower);
* **accuracy**: LeNet trained on ``mnist5k`` with the demo's settings (``rsjax.runs.demo.DEFAULTS``:
  Gaussian noise, lr 0.05, batch 128; ``--epochs`` as given) at each sigma, then every
  ``--skip``-th test image certified with both noises (same key, n0 = 100, ``--n``, alpha
  0.001): certified accuracy at radii 0 to 1.

Command (benchmarks/RESULTS.md)::

  python -m benchmarks.sound_noise --json benchmarks/results/sound_noise_cpu.json
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

import rsjax
from benchmarks.common import dump_json
from benchmarks.measure import SPECS, environment
from rsjax import data, metrics, models, training
from rsjax.runs.demo import DEFAULTS

NOISES = ("gaussian", "gaussian_8bit")
RADII = (0.0, 0.25, 0.5, 0.75, 1.0)


def speed(name: str, num: int, batch: int, reps: int) -> dict:
  """Samples/s of both noises on one random-weight model (alternating, best of ``reps``)."""
  spec = SPECS[name]
  model = models.create_model(name, num_classes=10, input_shape=spec.input_shape, rngs=0)
  apply_fn, params = models.to_apply_fn(model)
  x = (np.random.default_rng(0).integers(0, 256, (1, *spec.input_shape)) / 255).astype(np.float32)

  def run(noise: str) -> float:
    t = time.perf_counter()
    c = rsjax.sample_counts(
      0, apply_fn, params, x, sigma=0.25, num_classes=10, num=num, batch_size=batch, noise=noise
    )
    assert int(np.asarray(c).sum()) == num
    return time.perf_counter() - t

  for noise in NOISES:  # compile
    run(noise)
  times: dict[str, list[float]] = {n: [] for n in NOISES}
  for _ in range(reps):
    for noise in NOISES:
      times[noise].append(run(noise))
  rate = {n: num / min(t) for n, t in times.items()}
  return {
    "model": name,
    "num": num,
    "batch_size": batch,
    "samples_per_s": rate,
    "seconds": times,
    "sound_over_float": rate["gaussian_8bit"] / rate["gaussian"],
  }


def accuracy(sigma: float, epochs: int, skip: int, n: int) -> dict:
  """LeNet trained at ``sigma`` (the demo's settings), certified with both noises."""
  train_x, train_y = data.load("mnist5k", "train").arrays()
  test = data.load("mnist5k", "test")
  model = models.create_model("lenet", num_classes=10, input_shape=(28, 28, 1), rngs=0)
  cfg = training.TrainConfig(
    sigma=sigma,
    epochs=epochs,
    batch_size=DEFAULTS["batch_size"],
    lr=DEFAULTS["lr"],
    lr_step=DEFAULTS["lr_step"],
  )
  t = time.perf_counter()
  model, _ = training.train(jax.random.key(0), model, (train_x, train_y), cfg, progress=False)
  out: dict = {"sigma": sigma, "epochs": epochs, "train_s": time.perf_counter() - t}
  apply_fn, params = models.to_apply_fn(model)
  ids = np.arange(0, len(test), skip)
  x, y = test.get_batch(ids)
  out.update(images=len(ids), n=n, n0=100, alpha=0.001)
  for noise in NOISES:
    t = time.perf_counter()
    cert = rsjax.certify(
      jax.random.key(1), apply_fn, params, x, sigma=sigma, num_classes=10, ids=ids,
      n0=100, n=n, alpha=0.001, batch_size=1000, noise=noise,
    )  # fmt: skip
    acc = metrics.certified_accuracy(np.asarray(cert.prediction) == y, cert.radius, RADII)
    out[noise] = {
      "certify_s": time.perf_counter() - t,
      "certified_accuracy": {f"{r:g}": float(a) for r, a in zip(RADII, acc, strict=True)},
      "abstain": float(np.mean(cert.prediction < 0)),
      "counts_short_of_n": int((n - np.asarray(cert.counts).sum(1)).sum()),
    }
  return out


def main(argv: list[str] | None = None) -> dict:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--models", default="mlp,lenet,resnet20")
  p.add_argument("--reps", type=int, default=3)
  p.add_argument("--num", type=int, default=None, help="samples per speed run (default per model)")
  p.add_argument("--sigmas", default="0.25,0.5")
  p.add_argument("--epochs", type=int, default=DEFAULTS["epochs"])
  p.add_argument("--skip", type=int, default=10, help="certify every skip-th test image")
  p.add_argument("--n", type=int, default=1000, help="estimation samples per image")
  p.add_argument("--no-accuracy", action="store_true")
  p.add_argument("--json", default=None)
  args = p.parse_args(argv)

  nums = {"mlp": (20_000, 1000), "lenet": (10_000, 1000), "resnet20": (1_200, 200)}
  out: dict = {"environment": environment(()), "speed": [], "accuracy": []}
  print("| model | N | float Gaussian samples/s | sound 8-bit samples/s | sound / float |")
  print("|---|---|---|---|---|")
  for name in [m for m in args.models.split(",") if m]:
    num, batch = nums.get(name, (SPECS[name].num_quick, 256))
    num = args.num or num
    r = speed(name, num, batch, args.reps)
    out["speed"].append(r)
    s = r["samples_per_s"]
    print(
      f"| {name} | {num} | {s['gaussian']:.0f} | {s['gaussian_8bit']:.0f} | "
      f"{r['sound_over_float']:.3f} |",
      flush=True,
    )
  if not args.no_accuracy:
    print("\n| sigma | noise | " + " | ".join(f"r={r:g}" for r in RADII) + " | certify s |")
    print("|---|---|" + "---|" * (len(RADII) + 1))
    for sigma in (float(v) for v in args.sigmas.split(",")):
      a = accuracy(sigma, args.epochs, args.skip, args.n)
      out["accuracy"].append(a)
      for noise in NOISES:
        acc = a[noise]["certified_accuracy"]
        print(
          f"| {sigma:g} | {noise} | "
          + " | ".join(f"{acc[f'{r:g}']:.3f}" for r in RADII)
          + f" | {a[noise]['certify_s']:.1f} |",
          flush=True,
        )
  dump_json(args.json, out)
  return out


if __name__ == "__main__":
  main()
