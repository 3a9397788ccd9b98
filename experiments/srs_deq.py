"""Serialized randomized smoothing (SRS) against standard RS for a DEQ on MNIST.

Gao et al. (NeurIPS 2024), Table 1 in spirit: a deep equilibrium model trained
with Gaussian noise, certified with

* standard RS, every sample solved from z = 0 with 30 Anderson steps ("30A");
* SRS with 1 and 3 Anderson steps per chunk ("SRS-1A", "SRS-3A"): parallel
  chains warm-started from the previous chunk's fixed points, a 10-Anderson
  warm-up chunk, and the correlation-eliminated two-stage certificate in the
  paper's form, whose check samples are solved with the same 30A solver, so all
  three rows certify the same classifier (the DEQ solved with 30A from z = 0).

Same held-out images, same key (standard RS and SRS see the same noisy inputs),
images certified one at a time (as in the paper); seconds per image exclude the
first call (compilation), which is reported separately. ``f_evals_per_image``
counts evaluations of the equilibrium map, a hardware-independent cost.

Model: ``rsjax.deq.DEQClassifier`` (single-scale MDEQ-style block, 16 channels
at 14x14, flatten head, 25k parameters), trained here on the embedded
``mnist5k`` train split (4,000 real MNIST digits) with Gaussian noise
sigma = 0.5, Adam + cosine schedule, implicit gradients (8 Anderson steps
forward and backward) and Jacobian regularization (weight 2.0), as in MDEQ. The
generic ``rsjax.training.train`` (SGD, no Jacobian term) can train the same
module; this script uses its own short Adam loop.

Commands::

  python experiments/srs_deq.py --quick   # ~9-10 min on 2 CPU cores, training included
  python experiments/srs_deq.py           # full: N = 10,000, m = 400, 200 images

``--quick`` uses SMALL settings: 5 training epochs, 50 test images (every 20th
of the 1,000 held-out digits), n0 = 100, N = 2,000, m = 200 check samples,
100 chains, alpha = 0.001. With m = 200 the mismatch budget caps p_lower at
0.947 (``rsjax.deq.max_certifiable_radius``: R <= 0.81 at sigma = 0.5), and
N = 2,000 caps standard RS at R = 1.36, so the large radii are not comparable
to the paper's N = 10,000. Without ``m`` in the config, m is chosen per run by
``rsjax.deq.min_check_samples`` as the smallest m whose cap reaches
``cap_sigmas * sigma``; both caps are written to the JSON.

Output: ``results/srs_deq_quick.json`` (``--quick``) or ``results/srs_deq.json``
(in the repository root).

Numbers produced (``--quick``, seed 0, 1 CPU device on 2 shared cores, 524 s in
all; training 5 epochs: noisy test accuracy 0.918 with 30A, 0.908 with 3A and
0.818 with 1A from z = 0)::

                  s/image  f-evals  speed-up   certified accuracy at radius
                                               0     0.25  0.5   0.75  1.0   1.25  1.5
  standard-30A     5.69    63,000    1.0x     0.98  0.90  0.80  0.70  0.60  0.46  0.00
  SRS-1A           0.89     9,900    6.4x     0.92  0.80  0.74  0.52  0.00  0.00  0.00
  SRS-3A           1.23    13,700    4.6x     0.94  0.80  0.74  0.50  0.00  0.00  0.00

  SRS-1A: SRS/30A label agreement on the check samples 0.940, mean p_m_bar 0.123
  SRS-3A: agreement 0.968, mean p_m_bar 0.095 (mean SRS residual 0.067)

Re-run from a fresh clone after the code review (same command, quiet machine, 452 s
in all, 7 min 34 s wall): identical certified accuracies; seconds per image 4.79
(standard-30A), 0.835 (SRS-1A, 5.7x), 1.22 (SRS-3A, 3.9x). That run is the one in
``results/srs_deq_quick.json``. The speed-ups move with machine load (the table
above was taken while other jobs ran).

What this shows, honestly: the speed-up, 4.6-6.4x, is near the paper's 5-7x (the wall
clock follows the f-eval ratio; the 30A check samples are half of SRS's cost at
m = 200), but the accuracy cost is larger than the paper's one point: 4-6
points at radius 0, about 10 at 0.25, and nothing certified from radius 1.0 on.
Two causes: (1) with m = 200 the mismatch bound alone gives
r <= (alpha/2)^(1/m_A) ~ 0.96, so p_lower <= 0.947 and R <= 0.81 even with
perfect agreement (the paper uses m = 400 with N = 10,000); (2) the warm-started
chains disagree with the 30A DEQ on 3-6% of the samples, concentrated on the
hard images (agreement 0.61-0.93 on the worst dozen), which lowers r further
and makes those images abstain. A stronger Jacobian penalty helps: with weight
0.5 instead of 2.0 the agreement was 0.952 / 0.961 and certified accuracy at
radius 0 was 0.94 for both SRS rows (against 0.98 for 30A). Timings vary by
about 20% with the load of the shared machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

import jax
import numpy as np
import optax
from flax import nnx

from rsjax import data, deq, metrics, stats


@dataclasses.dataclass(frozen=True)
class Config:
  sigma: float = 0.5
  channels: int = 16
  train_steps: int = 8
  epochs: int = 20
  batch: int = 64
  lr: float = 2e-3
  jac_weight: float = 2.0
  images_every: int = 5
  n0: int = 100
  n: int = 10_000
  m: int | None = None  # None: the smallest m whose cap reaches cap_sigmas * sigma
  cap_sigmas: float = 2.0
  chains: int = 400
  alpha: float = 0.001
  standard_steps: int = 30
  warmup_steps: int = 10
  srs_steps: tuple[int, ...] = (1, 3)
  seed: int = 0


RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")


def get_config(quick: bool = False) -> Config:
  """The settings of one run (the numbers they produced are in the module docstring).

  Commands::

    python experiments/srs_deq.py --quick   # get_config(True): results/srs_deq_quick.json
    python experiments/srs_deq.py           # get_config(False): results/srs_deq.json

  Args:
    quick: 5 epochs, 50 images, N = 2,000, m = 200, 100 chains (~10 min on 2 cores)
      instead of the full 20 epochs, 200 images, N = 10,000, m from the mismatch budget
      (420: the smallest m that can certify 2 sigma), 400 chains.
  """
  if quick:
    return Config(epochs=5, images_every=20, n=2_000, m=200, chains=100)
  return Config()


def check_samples(cfg: Config) -> int:
  """The run's number of SRS check samples: ``cfg.m``, or from the mismatch budget."""
  if cfg.m is not None:
    return cfg.m
  return deq.min_check_samples(cfg.cap_sigmas * cfg.sigma, cfg.n, cfg.alpha, cfg.sigma)


def train_model(cfg: Config, x: np.ndarray, y: np.ndarray, x_eval, y_eval, log):
  """Gaussian-noise training with implicit gradients and the Jacobian loss."""
  model = deq.DEQClassifier(input_shape=x.shape[1:], num_classes=10, channels=cfg.channels,
                            groups=4, solver="anderson", steps=cfg.train_steps,
                            rngs=cfg.seed)
  steps_per_epoch = len(x) // cfg.batch
  sched = optax.cosine_decay_schedule(cfg.lr, cfg.epochs * steps_per_epoch)
  opt = nnx.Optimizer(model, optax.adam(sched), wrt=nnx.Param)
  sigma = cfg.sigma

  @nnx.jit
  def step(model, opt, xb, yb, key):
    k_noise, k_jac = jax.random.split(key)
    xn = xb + sigma * jax.random.normal(k_noise, xb.shape)

    def loss_fn(model):
      logits, jac = model.jacobian_loss(xn, k_jac)
      ce = optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()
      return ce + cfg.jac_weight * jac.mean(), (ce, jac.mean())

    (_, aux), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    opt.update(model, grads)
    return aux

  deq_fn, _ = deq.to_deq_fn(model)
  run = jax.jit(deq_fn, static_argnums=3)
  key = jax.random.key(cfg.seed)
  rng = np.random.default_rng(cfg.seed)
  eval_noise = cfg.sigma * rng.standard_normal(x_eval.shape).astype(np.float32)
  history = []
  for epoch in range(cfg.epochs):
    t0 = time.perf_counter()
    perm = rng.permutation(len(x))
    ce_sum = jac_sum = 0.0
    for b in range(steps_per_epoch):
      idx = perm[b * cfg.batch:(b + 1) * cfg.batch]
      ce, jac = step(model, opt, x[idx], y[idx], jax.random.fold_in(key, epoch * steps_per_epoch + b))
      ce_sum, jac_sum = ce_sum + ce, jac_sum + jac
    _, variables = nnx.split(model)
    entry = {"epoch": epoch + 1, "ce": float(ce_sum) / steps_per_epoch,
             "jac": float(jac_sum) / steps_per_epoch, "seconds": time.perf_counter() - t0}
    for k in (1, 3, cfg.standard_steps):
      logits, res = run(variables, x_eval + eval_noise, None, deq.SolverConfig(steps=k))
      entry[f"noisy_acc_{k}A"] = float(np.mean(np.asarray(logits).argmax(1) == y_eval))
      entry[f"residual_{k}A"] = float(np.mean(res.residual))
    history.append(entry)
    log(json.dumps(entry))
  return model, history


def f_evals(cfg: Config, method: str, steps: int) -> int:
  """Evaluations of the equilibrium map per image (selection + estimation + checks)."""
  if method == "standard":
    return (cfg.n0 + cfg.n) * steps

  def chain_evals(num):  # warm-up chunk, then `steps` per sample
    c = min(cfg.chains, num)
    return c * cfg.warmup_steps + (num - c) * steps

  return chain_evals(cfg.n0) + chain_evals(cfg.n) + check_samples(cfg) * cfg.standard_steps


def certify_all(cfg: Config, model, x, y, ids, method: str, steps: int, log):
  key = jax.random.key(cfg.seed + 1)
  kw = dict(sigma=cfg.sigma, num_classes=10, n0=cfg.n0, n=cfg.n, alpha=cfg.alpha,
            batch_size=cfg.chains)
  if method == "standard":
    kw.update(method="standard", solver=deq.SolverConfig("anderson", steps))
  else:
    kw.update(method="srs", solver=deq.SolverConfig("anderson", cfg.standard_steps),
              srs=deq.SRSConfig(solver=deq.SolverConfig("anderson", steps),
                                warmup=deq.SolverConfig("anderson", cfg.warmup_steps),
                                m=check_samples(cfg)))
  deq_fn, variables = deq.to_deq_fn(model)
  rows, times = [], []
  for i in range(len(x)):
    t0 = time.perf_counter()
    cert = deq.certify(key, deq_fn, variables, x[i:i + 1], ids=ids[i:i + 1], **kw)
    times.append(time.perf_counter() - t0)
    row = {"id": int(ids[i]), "label": int(y[i]), "predict": int(cert.prediction[0]),
           "radius": float(cert.radius[0]), "p_lower": float(cert.p_lower[0])}
    if method == "srs":
      row.update(mismatch_upper=float(cert.mismatch_upper[0]),
                 check_selected=int(cert.check_selected[0]),
                 check_agree=int(cert.check_agree[0]), residual=float(cert.residual[0]))
    rows.append(row)
  name = f"standard-{steps}A" if method == "standard" else f"SRS-{steps}A"
  log(f"{name}: first call {times[0]:.1f}s, then {np.mean(times[1:]):.3f}s/image")
  return name, rows, times


def summarize(cfg: Config, rows, times, method, steps, radii):
  pred = np.array([r["predict"] for r in rows])
  label = np.array([r["label"] for r in rows])
  radius = np.array([r["radius"] for r in rows])
  correct = pred == label
  out = {
      "seconds_per_image": float(np.mean(times[1:])),
      "first_call_seconds": float(times[0]),
      "f_evals_per_image": f_evals(cfg, method, steps),
      "certified_accuracy": {f"{r:g}": float(a) for r, a in
                             zip(radii, metrics.certified_accuracy(correct, radius, radii))},
      "acr": metrics.average_certified_radius(correct, radius),
      "abstain_rate": float(np.mean(pred < 0)),
  }
  if method == "srs":
    out["mean_mismatch_upper"] = float(np.mean([r["mismatch_upper"] for r in rows]))
    sel = np.array([r["check_selected"] for r in rows])
    agree = np.array([r["check_agree"] for r in rows])
    out["check_agreement"] = float(agree.sum() / max(sel.sum(), 1))
    out["mean_srs_residual"] = float(np.mean([r["residual"] for r in rows]))
  return out


def run(cfg: Config, out_path: str, log=print) -> dict:
  t_start = time.perf_counter()
  train = data.load("mnist5k", "train")
  test = data.load("mnist5k", "test")
  ids = np.arange(0, len(test.x), cfg.images_every)
  x_cert, y_cert = test.x[ids], test.y[ids].astype(np.int64)
  model, history = train_model(cfg, train.x, train.y.astype(np.int32), test.x[:500],
                               test.y[:500], log)
  radii = metrics.radius_grid(1.5, 0.25)
  results = {}
  per_image = {}
  for method, steps in [("standard", cfg.standard_steps)] + [("srs", k) for k in cfg.srs_steps]:
    name, rows, times = certify_all(cfg, model, x_cert, y_cert, ids, method, steps, log)
    results[name] = summarize(cfg, rows, times, method, steps, radii)
    per_image[name] = rows
    log(f"{name}: " + json.dumps(results[name]))
  base = results[f"standard-{cfg.standard_steps}A"]
  for name, res in results.items():
    res["speedup_vs_standard"] = base["seconds_per_image"] / res["seconds_per_image"]
    res["f_eval_ratio_vs_standard"] = base["f_evals_per_image"] / res["f_evals_per_image"]
  report = {
      "config": dataclasses.asdict(cfg),
      "m": check_samples(cfg),
      "srs_radius_cap": deq.max_certifiable_radius(cfg.n, check_samples(cfg), cfg.alpha, cfg.sigma),
      "standard_radius_cap": float(stats.max_radius(cfg.n, cfg.alpha, cfg.sigma)),
      "dataset": "mnist5k (train 4000 / test 1000)",
      "images": ids.tolist(),
      "num_params": int(sum(v.size for v in jax.tree.leaves(nnx.state(model, nnx.Param)))),
      "train_history": history,
      "results": results,
      "per_image": per_image,
      "total_seconds": time.perf_counter() - t_start,
      "jax": jax.__version__,
      "devices": [str(d) for d in jax.devices()],
  }
  os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
  with open(out_path, "w") as fh:
    json.dump(report, fh, indent=1)
  log(f"wrote {out_path} ({report['total_seconds']:.0f}s)")
  return report


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--quick", action="store_true", help="small settings (~10 min on 2 CPUs)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", default=None, help="output JSON path")
  args = parser.parse_args(argv)
  cfg = dataclasses.replace(get_config(args.quick), seed=args.seed)
  out = args.out or os.path.join(RESULTS, "srs_deq_quick.json" if args.quick else "srs_deq.json")
  run(cfg, out)


if __name__ == "__main__":
  main()
