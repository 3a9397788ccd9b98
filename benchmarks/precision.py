"""bfloat16 versus float32 certification on a trained model (same inputs, same noise).

Trains a small classifier with Gaussian noise (``rsjax.training.train``) on the
bundled 5,000 MNIST digits (``rsjax.data`` "mnist5k"), then certifies the same
test inputs with ``rsjax.certify`` in float32 and with
``compute_dtype=jnp.bfloat16``. Both runs use the same key and ids, hence the
*same* noise: the only difference is the precision of the forward pass. Reported:
certified accuracy at a few radii, agreement of the certified predictions
(abstentions included), radius differences, the share of noisy samples whose
class changed (a lower bound from the counts) and the time of each run.

Parity (the GPU suite's bf16 criterion, docs/PERFORMANCE.md): bf16 passes when
its certified accuracy is within 1 point of fp32's at every radius
(:func:`certified_accuracy_parity`).

Command::

  python -m benchmarks.precision --model lenet --epochs 3 --images 40 --n 4000
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import rsjax
from benchmarks.common import dump_json
from rsjax import data, metrics, models, training

RADII = (0.0, 0.25, 0.5, 0.75)


def certified_accuracy_parity(labels, cert_a, cert_b, radii=RADII, max_points: float = 1.0) -> dict:
  """Statistical parity of two certifications of the same inputs (e.g. fp32 and bf16).

  Args:
    labels: ``[B]`` true classes.
    cert_a: certificate (``prediction``, ``radius``: ``[B]``), e.g. float32.
    cert_b: certificate of the same inputs, e.g. bfloat16.
    radii: radii at which certified accuracy is compared.
    max_points: largest allowed |difference| in percentage points.

  Returns:
    ``{"radii", "accuracy_a", "accuracy_b", "max_abs_diff_points", "within"}``:
    certified accuracies, the largest |difference| over ``radii`` in points and
    whether it is at most ``max_points``.
  """
  labels = np.asarray(labels)
  acc = [
    metrics.certified_accuracy(np.asarray(c.prediction) == labels, c.radius, radii)
    for c in (cert_a, cert_b)
  ]
  diff = float(np.max(np.abs(np.asarray(acc[0]) - np.asarray(acc[1])))) * 100.0
  return {
    "radii": [float(r) for r in radii],
    "accuracy_a": [float(a) for a in acc[0]],
    "accuracy_b": [float(a) for a in acc[1]],
    "max_abs_diff_points": diff,
    "within": diff <= max_points + 1e-9,
  }


def main(argv=None) -> dict:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--model", default="lenet", help="an rsjax.models name for 28x28x1 inputs")
  p.add_argument("--sigma", type=float, default=0.25)
  p.add_argument("--epochs", type=int, default=3)
  p.add_argument("--images", type=int, default=40, help="test inputs to certify")
  p.add_argument("--n", type=int, default=4000, help="estimation samples (n0 = 100)")
  p.add_argument("--alpha", type=float, default=0.001)
  p.add_argument("--batch-size", default="auto")
  p.add_argument("--json", default=None)
  args = p.parse_args(argv)

  train_x, train_y = data.load("mnist5k", "train").arrays()
  test = data.load("mnist5k", "test")
  model = models.create_model(args.model, num_classes=10, input_shape=(28, 28, 1), rngs=0)
  t = time.perf_counter()
  cfg = training.TrainConfig(
    sigma=args.sigma, epochs=args.epochs, batch_size=128, lr=0.05, lr_step=max(args.epochs, 1)
  )
  training.train(jax.random.key(0), model, (train_x, train_y), cfg, progress=False)
  train_s = time.perf_counter() - t
  apply_fn, variables = models.to_apply_fn(model)
  ids = np.linspace(0, len(test) - 1, args.images).astype(np.int64)
  x, y = test.get_batch(ids)
  clean = float(np.mean(np.asarray(jax.jit(apply_fn)(variables, x)).argmax(1) == y))
  bs = args.batch_size if args.batch_size == "auto" else int(args.batch_size)

  out = {
    "model": args.model,
    "sigma": args.sigma,
    "epochs": args.epochs,
    "train_s": train_s,
    "images": args.images,
    "n": args.n,
    "alpha": args.alpha,
    "clean_accuracy": clean,
  }
  certs = {}
  for name, dtype in (("float32", None), ("bfloat16", jnp.bfloat16)):
    kw = dict(
      sigma=args.sigma,
      num_classes=10,
      n0=100,
      n=args.n,
      alpha=args.alpha,
      batch_size=bs,
      ids=ids,
      compute_dtype=dtype,
    )
    rsjax.certify(
      jax.random.key(1), apply_fn, variables, x[:1], **{**kw, "ids": ids[:1]}
    )  # compile
    t = time.perf_counter()
    certs[name] = rsjax.certify(jax.random.key(2), apply_fn, variables, x, **kw)
    out[f"{name}_s"] = time.perf_counter() - t
    acc = metrics.certified_accuracy(certs[name].prediction == y, certs[name].radius, RADII)
    out[f"{name}_certified_accuracy"] = {str(r): float(a) for r, a in zip(RADII, acc, strict=True)}
  c32, c16 = certs["float32"], certs["bfloat16"]
  out["prediction_agreement"] = float(np.mean(c32.prediction == c16.prediction))
  out["max_abs_radius_diff"] = float(np.max(np.abs(c32.radius - c16.radius)))
  out["mean_abs_radius_diff"] = float(np.mean(np.abs(c32.radius - c16.radius)))
  out["parity"] = certified_accuracy_parity(y, c32, c16, RADII)
  changed = np.abs(c32.counts.astype(np.int64) - c16.counts).sum(1) / 2 / args.n
  out["changed_sample_fraction_lower_bound_mean"] = float(changed.mean())
  out["changed_sample_fraction_lower_bound_max"] = float(changed.max())

  print(
    f"# bf16 vs fp32: {args.model} on mnist5k, sigma {args.sigma}, {args.images} test "
    f"inputs, n0 = 100, n = {args.n}, alpha = {args.alpha}; clean accuracy {clean:.3f}"
  )
  print("| precision | " + " | ".join(f"cert. acc. r={r}" for r in RADII) + " | time s |")
  print("|---|" + "---|" * (len(RADII) + 1))
  for name in ("float32", "bfloat16"):
    accs = out[f"{name}_certified_accuracy"]
    print(
      f"| {name} | "
      + " | ".join(f"{accs[str(r)]:.3f}" for r in RADII)
      + f" | {out[name + '_s']:.1f} |"
    )
  print(
    f"prediction agreement {out['prediction_agreement']:.3f}; radius |diff| mean "
    f"{out['mean_abs_radius_diff']:.4f}, max {out['max_abs_radius_diff']:.4f}; samples whose "
    f"class changed >= {out['changed_sample_fraction_lower_bound_mean']:.4f} (mean), "
    f"{out['changed_sample_fraction_lower_bound_max']:.4f} (max)"
  )
  par = out["parity"]
  print(
    f"parity: certified accuracy differs by at most {par['max_abs_diff_points']:.2f} points "
    f"({'within' if par['within'] else 'NOT within'} 1 point)"
  )
  dump_json(args.json, out)
  return out


if __name__ == "__main__":
  main()
