"""Budgeted CERTIFY versus fixed-N CERTIFY on the same inputs, grid and noise, in one run.

Models (trained here with Gaussian noise, resumed from ``--workdir`` when done):

* ``mnist-lenet``: the demo's recipe, LeNet on the bundled 5,000 MNIST digits
  (``rsjax train --dataset mnist5k --model lenet --sigma S --epochs 20 --batch
  128 --lr 0.05 --lr-step-size 8``), at sigma 0.25 and 0.5.
* ``cifar-shaped-lenet``: no CIFAR-10 is available offline, so a CIFAR-*shaped*
  stand-in: the same digits zero-padded to 32x32 and repeated over 3 channels,
  LeNet with a 3-channel first convolution (CIFAR-10 input statistics), sigma
  0.25, ``--cifar-epochs`` epochs. It measures the cost on 32x32x3 inputs; its
  accuracies are not CIFAR-10 accuracies.

For each model and sigma, every ``--chunk`` test inputs (every k-th test digit)
are certified by ``rsjax.certify(n=N)`` and then by ``rsjax.certify(n=N,
budget=grid)`` with the same key, ids, ``n0``, ``alpha`` and batch size, so both
see the same noise (an input that budgeted CERTIFY runs to ``N`` has exactly
fixed CERTIFY's counts). Chunks of the sigmas alternate, so both methods and
all sigmas meet the same machine load. Written to ``--json`` after every chunk:
per model and sigma, for ``fixed``, ``budgeted`` and ``anytime``, the mean samples per input
(estimation samples; the ``n0`` selection samples come on top of both), the
wall seconds (all chunks, and without the first chunk, which holds the
compilation), the certified accuracy at each grid radius, and each input's
samples, radius and correctness (``per_input``, in ``test_indices`` order).

Command (the run that wrote ``benchmarks/results/budgeted.json``, 2026-11-26,
every rule beside fixed N: ``Budget`` and ``Anytime`` at its defaults, mixture
share 0.6, agree weight 1/2, looks at ratio 1.01; models trained by the
command, 10 CIFAR-shaped epochs)::

  python -m benchmarks.budgeted --images 100 --skip 10 --cifar-images 20

(``--skip 10``: the bundled test split has 1,000 digits, so 100 inputs need
every 10th.) CPU, JAX 0.10.2, 2 cores shared with other jobs, 15 min of
certification. Grid 0, 0.25, ..., 1.5; n0 = 100, N = N_max = 100,000, alpha =
0.001. Samples per input against fixed N, same certified accuracy at every
radius except one digit one level lower at 1.5 (sigma 0.5, both rules):
``Budget`` 8.9x / 4.0x / 10.9x, ``Anytime`` 11.8x / 6.7x / 15.7x at sigma 0.25 /
sigma 0.5 / CIFAR-shaped (``benchmarks/RESULTS.md``, issue 40). The run before
(2026-11-23, ``Budget`` only, models of an earlier command) gave ``Budget`` 9.6x
/ 4.3x / 10.1x; the earlier ``Anytime`` settings' runs on the same models as
this one are ``budgeted_anytime.json`` (alpha in halves), ``budgeted_anytime_share06.json``
(share 0.6, no agree weight, looks 1.05) and ``anytime_settings/*.json``
(``--fixed-from benchmarks/results/budgeted_anytime.json --anytime FIELD=VALUE``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

import jax
import numpy as np

import rsjax
from benchmarks.common import dump_json
from rsjax import data, metrics, models, training
from rsjax.engine import anytime
from rsjax.engine import budget as budgeted
from rsjax.runs import spec as runspec

GRID = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5)


def cifar_shaped(x: np.ndarray) -> np.ndarray:
  """28x28x1 digits -> 32x32x3: zero-padded by 2 pixels, repeated over 3 channels."""
  x = np.pad(x, ((0, 0), (2, 2), (2, 2), (0, 0)))
  return np.repeat(x, 3, axis=-1)


def _train(workdir, dataset, sigma, epochs, shape_fn):
  """The demo's LeNet recipe (``rsjax train`` defaults otherwise); resumes from ``workdir``
  (``rsjax train ... --out WORKDIR/lenet_mnist5k_sigma_S`` leaves the same run there)."""
  train, test = data.load("mnist5k", "train"), data.load("mnist5k", "test")
  (x, y), (xt, yt) = train.arrays(), test.arrays()
  x, xt = shape_fn(x), shape_fn(xt)
  shape = tuple(x.shape[1:])
  normalize = "auto" if shape[-1] == 1 else "cifar10"
  model = models.create_model(
    "lenet", num_classes=10, input_shape=shape, rngs=0, normalize=normalize
  )
  config = {"model": "lenet", "num_classes": 10, "input_shape": list(shape), "dataset": dataset}
  run_dir = os.path.join(workdir, f"lenet_{dataset}_sigma_{sigma:g}")
  model, history = training.train(
    jax.random.key(0),
    model,
    (x, y),
    training.TrainConfig(sigma=sigma, epochs=epochs, batch_size=128, lr=0.05, lr_step=8),
    eval_data=(xt, yt),
    workdir=run_dir,
    model_config=config,
    progress=False,
  )
  apply_fn, params = models.to_apply_fn(model)
  return apply_fn, params, xt, yt, history[-1]["clean_acc"] if history else float("nan")


def _summary(rows, grid):
  correct = np.concatenate([r["correct"] for r in rows])
  radius = np.concatenate([r["radius"] for r in rows])
  samples = np.concatenate([r["samples"] for r in rows])
  times = [r["seconds"] for r in rows]
  return {
    "images": int(correct.size),
    "mean_samples": float(samples.mean()),
    "samples": {k: float(v) for k, v in metrics.samples_summary(samples).items()},
    "wall_s": float(sum(times)),
    "wall_s_without_first_chunk": float(sum(times[1:])),
    "certified_accuracy": {
      f"{r:g}": float(a)
      for r, a in zip(grid, metrics.certified_accuracy(correct, radius, grid), strict=True)
    },
    "per_input": {
      "samples": [int(v) for v in samples],
      "radius": [float(v) for v in radius],
      "correct": [bool(v) for v in correct],
    },
  }


def _earlier_rows(earlier: dict, key: str, ids, method: str) -> dict:
  """One chunk's rows of ``method`` from an earlier run's JSON (wall time: none)."""
  run = earlier[key]
  pos = {int(i): k for k, i in enumerate(run["test_indices"])}
  missing = [int(i) for i in ids if int(i) not in pos]
  if missing:
    raise SystemExit(f"--fixed-from: {key} has no row of test inputs {missing}")
  take = [pos[int(i)] for i in ids]
  per = run[method]["per_input"]
  return dict(
    correct=np.asarray(per["correct"])[take],
    radius=np.asarray(per["radius"])[take],
    samples=np.asarray(per["samples"])[take],
    seconds=float("nan"),
  )


def _same_rows(now: dict, before: dict, key: str) -> None:
  """Stops the run unless ``Budget``'s rows equal the earlier run's (same models and code)."""
  same = np.array_equal(now["samples"], before["samples"]) and np.array_equal(
    np.asarray(now["correct"]), before["correct"]
  )
  same = same and np.allclose(now["radius"], before["radius"], rtol=1e-12, atol=0.0)
  if not same:
    raise SystemExit(
      f"--fixed-from: {key}: Budget's rows differ from the earlier run's: not the same models, "
      "inputs, key or code, so its fixed-N rows are not this run's"
    )


def main(argv=None) -> dict:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--images", type=int, default=100, help="MNIST test inputs per sigma")
  p.add_argument("--cifar-images", type=int, default=20, help="inputs of the CIFAR-shaped model")
  p.add_argument("--sigmas", type=float, nargs="+", default=[0.25, 0.5])
  p.add_argument("--cifar-epochs", type=int, default=10)
  p.add_argument("--n", type=int, default=100_000, help="fixed N = budgeted N_max")
  p.add_argument("--n0", type=int, default=100)
  p.add_argument("--alpha", type=float, default=0.001)
  p.add_argument("--batch-size", type=int, default=1000)
  p.add_argument("--chunk", type=int, default=10, help="inputs per certify call")
  p.add_argument(
    "--skip",
    type=int,
    default=10,
    help="certify every skip-th test input (1,000 test digits: 10 gives 100)",
  )
  p.add_argument(
    "--rules",
    nargs="+",
    default=["budgeted", "anytime"],
    choices=["budgeted", "anytime"],
    help="budgeted rules run beside fixed N: 'budgeted' (Budget, the looks rule), 'anytime'",
  )
  p.add_argument("--workdir", default="runs/budgeted")
  p.add_argument("--json", default="benchmarks/results/budgeted.json")
  p.add_argument(
    "--fixed-from",
    default=None,
    help="take fixed N's rows from this earlier run's JSON (same --workdir models, inputs and "
    "key) instead of certifying them again; needs 'budgeted' in --rules, whose rows must equal "
    "that run's (else the models or the code differ, and the run stops)",
  )
  p.add_argument(
    "--anytime",
    nargs="*",
    default=[],
    metavar="FIELD=VALUE",
    help="fields of the Anytime rule other than its defaults, e.g. agree_weight=0.75 ratio=1.01",
  )
  args = p.parse_args(argv)
  try:
    fields = {k: type(getattr(anytime.Anytime(GRID), k))(v)
              for k, v in (f.split("=", 1) for f in args.anytime)}  # fmt: skip
    rule_anytime = anytime.Anytime(GRID, **fields)
  except (AttributeError, ValueError) as e:
    p.error(f"--anytime: {e}")
  earlier = None
  if args.fixed_from:
    if "budgeted" not in args.rules:
      p.error("--fixed-from needs 'budgeted' in --rules (its rows check the models are the same)")
    with open(args.fixed_from, encoding="utf-8") as fh:
      earlier = json.load(fh)["runs"]

  runs = [
    ("mnist-lenet", "mnist5k", s, args.images, 20, lambda a: a)
    for s in args.sigmas
    if args.images > 0
  ]
  if args.cifar_images > 0:
    runs.append(
      (
        "cifar-shaped-lenet",
        "mnist5k-32x32x3",
        0.25,
        args.cifar_images,
        args.cifar_epochs,
        cifar_shaped,
      )
    )
  setups, rows = {}, {}
  for name, dataset, sigma, images, epochs, shape_fn in runs:
    key = f"{name} sigma={sigma:g}"
    apply_fn, params, xt, yt, clean = _train(args.workdir, dataset, sigma, epochs, shape_fn)
    idx = np.asarray(runspec.declared_indices(len(xt), skip=args.skip, count=images))
    setups[key] = dict(
      model=name,
      sigma=sigma,
      apply_fn=apply_fn,
      params=params,
      x=xt,
      y=yt,
      idx=idx,
      clean_accuracy=float(clean),
    )
    rows[key] = {m: [] for m in ["fixed", *args.rules]}

  cert_key = jax.random.key(1)
  out = {}
  num_chunks = max(-(-len(s["idx"]) // args.chunk) for s in setups.values())
  t_start = time.perf_counter()
  for c in range(num_chunks):
    for key, s in setups.items():
      ids = s["idx"][c * args.chunk : (c + 1) * args.chunk]
      if not len(ids):
        continue
      x, y = s["x"][ids], s["y"][ids]
      common = dict(
        sigma=s["sigma"],
        num_classes=10,
        n0=args.n0,
        n=args.n,
        alpha=args.alpha,
        batch_size=args.batch_size,
        ids=ids,
      )
      rules = {"fixed": None, "budgeted": GRID, "anytime": rule_anytime}
      for method in rows[key]:
        budget = rules[method]
        if earlier is not None and method == "fixed":
          rows[key][method].append(_earlier_rows(earlier, key, ids, "fixed"))
          continue
        t0 = time.perf_counter()
        cert = rsjax.certify(cert_key, s["apply_fn"], s["params"], x, budget=budget, **common)
        dt = time.perf_counter() - t0
        used = cert.num_samples if budget is not None else np.full(len(ids), args.n)
        rows[key][method].append(
          dict(correct=(cert.prediction == y), radius=cert.radius, samples=used, seconds=dt)
        )
      out[key] = {
        "model": s["model"],
        "sigma": s["sigma"],
        "clean_accuracy": s["clean_accuracy"],
        "test_indices": [int(i) for i in s["idx"][: (c + 1) * args.chunk]],
        **{m: _summary(r, GRID) for m, r in rows[key].items()},
      }
      if earlier is not None:
        _same_rows(rows[key]["budgeted"][-1], _earlier_rows(earlier, key, ids, "budgeted"), key)
        out[key]["fixed_from"] = args.fixed_from
      f = out[key]["fixed"]
      for rule in args.rules:
        b, tag = out[key][rule], "" if rule == "budgeted" else f"_{rule}"
        out[key]["samples_ratio" + tag] = f["mean_samples"] / b["mean_samples"]
        # None with --fixed-from: fixed N's time was taken in another run.
        wall = f["wall_s"] / b["wall_s"] if np.isfinite(f["wall_s"]) else None
        out[key]["wall_ratio" + tag] = wall
        out[key]["max_accuracy_gap_points" + tag] = 100 * max(
          abs(f["certified_accuracy"][r] - b["certified_accuracy"][r])
          for r in f["certified_accuracy"]
        )
        print(
          f"[{time.perf_counter() - t_start:7.0f}s] {key} {rule}: {b['images']} images, samples "
          f"{f['mean_samples']:.0f} vs {b['mean_samples']:.0f} "
          f"({out[key]['samples_ratio' + tag]:.2f}x), wall {f['wall_s']:.0f}s vs "
          f"{b['wall_s']:.0f}s ({wall or float('nan'):.2f}x), max accuracy gap "
          f"{out[key]['max_accuracy_gap_points' + tag]:.1f} points",
          flush=True,
        )
      budget = dataclasses.asdict(budgeted.Budget(GRID))
      result = {
        "grid": list(GRID),
        "n": args.n,
        "n0": args.n0,
        "alpha": args.alpha,
        "batch_size": args.batch_size,
        "chunk": args.chunk,
        "budget": budget,
        "anytime": {**dataclasses.asdict(rule_anytime), "rule": anytime.RULE},
        "looks": [int(v) for v in budgeted.Budget(GRID).looks(args.n)],
        "jax": jax.__version__,
        "device": str(jax.devices()[0]),
        "runs": out,
      }
      dump_json(args.json, result)
  return out


if __name__ == "__main__":
  main()
