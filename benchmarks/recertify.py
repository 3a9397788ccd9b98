"""Incremental certification (``rsjax recertify``) against certifying each child from scratch.

Trains a parent with ``rsjax train``, certifies it (``rsjax certify``, N0 100, N ``--n``),
makes its children (bfloat16 compute of the same model directory, int8 weights, magnitude
pruning to ``--sparsity``, a copy fine-tuned for ``--tune-steps`` SGD steps on noisy training
inputs), and for each child reports the samples, wall time and certified accuracy at every
radius of ``rsjax recertify`` (``--n-disagree`` samples an input) and of ``rsjax certify``
from scratch (N0 + N), with the mean disagreement. Every run is checked by ``rsjax verify``.

Command (the results of the numbers in RESULTS.md)::

  python -m benchmarks.recertify --dataset mnist5k --model lenet --epochs 3 --sigma 0.25 \\
      --images 100 --n 10000 --n-disagree 1000
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.common import dump_json
from rsjax import cli, data, models, verify
from rsjax.runs import io

RADII = (0.0, 0.25, 0.5, 0.75, 1.0)


def _cli(*argv) -> float:
  t0 = time.perf_counter()
  if cli.main([str(a) for a in argv]) != 0:
    raise SystemExit(f"failed: rsjax {' '.join(map(str, argv))}")
  return time.perf_counter() - t0


def _accuracy(path: str) -> dict:
  res = io.read_certify(path)
  ok = (res.predict == res.label) & (res.predict >= 0)
  return {f"{r:g}": float(np.mean(ok & (res.radius >= r))) for r in RADII}


def fine_tune(model, dataset: str, sigma: float, steps: int, lr: float, seed: int = 0):
  """A copy of ``model`` after ``steps`` SGD steps of cross-entropy on noisy training inputs."""
  from flax import nnx

  model = nnx.clone(model)
  train = data.load(dataset, "train")
  apply_fn, params = models.to_apply_fn(model)
  rng = np.random.default_rng(seed)

  def loss(p, x, y):
    logits = apply_fn(p, x)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

  grad = jax.jit(jax.grad(loss))
  for _ in range(steps):
    x, y = train.get_batch(rng.choice(len(train), 64, replace=False))
    x = x + sigma * rng.standard_normal(x.shape).astype(np.float32)
    g = grad(params, jnp.asarray(x), jnp.asarray(y, jnp.int32))
    params = jax.tree.map(lambda p, d: p - lr * d if jnp.issubdtype(p.dtype, jnp.floating) else p,
                          params, g)  # fmt: skip
  nnx.update(model, params)
  return model


def _children(a, parent_dir: str, root: str) -> dict:
  """``{name: (model directory, extra recertify/certify flags)}``."""
  model, config = models.load_model(parent_dir)
  made = {
    "int8": models.quantize_int8(model),
    f"prune{a.sparsity:g}": models.prune_magnitude(model, a.sparsity),
    f"tuned{a.tune_steps}": fine_tune(model, a.dataset, a.sigma, a.tune_steps, a.tune_lr),
  }
  out = {"bf16": (parent_dir, ("--precision", "bfloat16"))}
  for name, child in made.items():
    d = os.path.join(root, name)
    if not os.path.isdir(d):
      models.save_child(d, child, config, {"transform": name})
    out[name] = (d, ())
  return out


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--dataset", default="mnist5k")
  p.add_argument("--model", default="lenet")
  p.add_argument("--epochs", type=int, default=3)
  p.add_argument("--sigma", type=float, default=0.25)
  p.add_argument("--images", type=int, default=100)
  p.add_argument("--skip", type=int, default=1)
  p.add_argument("--n", type=int, default=10_000)
  p.add_argument("--n-disagree", type=int, default=1000)
  p.add_argument("--sparsity", type=float, default=0.5)
  p.add_argument("--tune-steps", type=int, default=20)
  p.add_argument("--tune-lr", type=float, default=0.01)
  p.add_argument("--root", default=None, help="where the models and runs go (a new temp dir)")
  p.add_argument("--out", default="benchmarks/results/recertify.json")
  a = p.parse_args(argv)
  root = a.root or tempfile.mkdtemp(prefix="rsjax-recertify-")
  parent_dir = os.path.join(root, f"{a.model}_{a.sigma:g}")
  if not os.path.isdir(parent_dir):
    _cli("train", "--dataset", a.dataset, "--model", a.model, "--sigma", a.sigma, "--epochs",
         a.epochs, "--out", parent_dir, "--quiet")  # fmt: skip
  rows = ("--max", a.images * a.skip, "--skip", a.skip, "--batch", 2000, "--quiet", "--overwrite")
  parent = os.path.join(root, f"parent_{a.sigma:g}.tsv")
  t_parent = _cli("certify", parent_dir, parent, "--N", a.n, *rows)
  assert verify.verify(parent).ok
  result = {"settings": vars(a), "parent": {"seconds": t_parent, "samples": 100 + a.n,
                                            "accuracy": _accuracy(parent)}}  # fmt: skip
  for name, (d, extra) in _children(a, parent_dir, root).items():
    inc, full = os.path.join(root, f"{name}_re.tsv"), os.path.join(root, f"{name}_full.tsv")
    t_inc = _cli("recertify", parent, d, inc, "--N", a.n_disagree, "--batch", 2000, "--quiet",
                 "--overwrite", *extra)  # fmt: skip
    t_full = _cli("certify", d, full, "--N", a.n, *rows, *extra)
    assert verify.verify(inc).ok and verify.verify(full).ok
    res = io.read_certify(inc)
    acc_inc, acc_full = _accuracy(inc), _accuracy(full)
    result[name] = {
      "zeta_upper_mean": float(np.mean(res.extra["zeta"])),
      "recertify": {"samples": a.n_disagree, "seconds": t_inc, "accuracy": acc_inc},
      "scratch": {"samples": 100 + a.n, "seconds": t_full, "accuracy": acc_full},
      "sample_ratio": (100 + a.n) / a.n_disagree,
      "max_accuracy_gap_points": 100 * max(abs(acc_inc[r] - acc_full[r]) for r in acc_inc),
    }
    print(name, result[name], flush=True)
  dump_json(a.out, result)


if __name__ == "__main__":
  main()
