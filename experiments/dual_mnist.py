"""Dual randomized smoothing (Sun, Mao and Vechev, ICLR 2026) on the embedded MNIST.

Two Gaussian LeNet experts on the ``mnist5k`` train split (4,000 digits), at sigma 0.25
and 0.5, are each certified with Cohen's CERTIFY at their sigma; a LeNet sigma estimator
(2 classes: the expert's index) is trained at sigma_g = 0.25 on the routing targets of
``rsjax.dual.training.estimator_targets`` (per training digit, the sigma whose expert
certifies the largest radius on 8 noisy samples), and ``--method dual`` certifies the
same held-out digits with the estimator and both experts (alpha split in half; the
estimator draws as many samples as the expert). Rows: certified accuracy at radii 0 to 2
for each sigma, their envelope (the better sigma at each radius, chosen after the fact:
not one classifier), and Dual RS; the inference cost of Dual RS over one smoothed
classifier (forward passes per input, and wall time).

Commands::

  python experiments/dual_mnist.py --quick     # results/dual_quick.json, .png, runs

The experts and the estimator are trained into ``runs/dual_quick`` (resumed); the three
certify runs are written to ``results/dual_quick/`` (``rsjax verify`` accepts each; the
dual run names the experts' directories, so ``rsjax audit`` needs ``runs/dual_quick``).

Numbers produced (``--quick``, seed 0, 50 test digits, N = 2,000, alpha = 0.001, sigma_g
0.5; 101 s from scratch on 2 shared CPU cores)::

              certified accuracy at r = 0    .25   .5    .75   1.0   1.25  1.5
  cohen 0.25                         0.96  0.94  0.84  0.00  0.00  0.00  0.00
  cohen 0.5                          0.94  0.86  0.74  0.60  0.46  0.22  0.00
  envelope                           0.96  0.94  0.84  0.60  0.46  0.22  0.00
  dual                               0.94  0.86  0.72  0.60  0.38  0.16  0.00

What this shows, honestly: the routing targets (the larger estimated radius on 8 draws)
pick sigma 0.5 for 84% of the training digits, and the estimator learns the majority:
it chooses sigma 0.5 for all 50 test digits, so Dual RS is the sigma-0.5 expert with
half the alpha and the estimator's radius as a cap (0.38 vs 0.46 at r = 1.0). It is not
within 2 points of the envelope (0.86 vs 0.94 at r = 0.25): the issue's bar is not met
with these targets. With sigma_g = 0.25 the estimator's radius caps every row below
0.65 (N = 2,000), so its noise must be as large as the radii claimed. Inference cost:
2x the forward passes of one smoothed classifier (the estimator draws n0 + n too).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time

import numpy as np
from _common import (
  RESULTS,
  ROOT,
  BaseTraining,
  certified_curve,
  certify_run,
  lenet_mnist5k,
  load_splits,
  repo_path,
  save_figure,
  save_results,
  sigmas_config,
)

RADII = tuple(np.round(np.arange(0.0, 2.01, 0.25), 2).tolist())


@dataclasses.dataclass(frozen=True)
class Config(BaseTraining):
  """The experiment's settings (``get_config`` fills them; the base models' first)."""

  sigma_estimator: float
  draws: int
  skip: int
  n0: int
  n: int
  alpha: float
  seed: int
  out: str  # models
  runs: str  # the certify runs (under results/)
  results: str  # results/NAME, without .json / .png


def get_config(quick: bool) -> Config:
  """``python experiments/dual_mnist.py --quick`` (``--quick``: 6 epochs, 50 digits, N 2,000)."""
  name = "dual_quick" if quick else "dual_full"
  return Config(
    **lenet_mnist5k(quick),
    sigma_estimator=0.5,
    draws=8,
    skip=20 if quick else 2,
    n0=100,
    n=2_000 if quick else 20_000,
    alpha=0.001,
    seed=0,
    out=os.path.join(ROOT, "runs", name),
    runs=os.path.join(RESULTS, name),
    results=os.path.join(RESULTS, name),
  )


def _train(cfg: Config, workdir: str, model_config: dict, data, sigma: float, eval_data):
  from rsjax import models, training

  m = models.create_model(
    cfg.model,
    num_classes=model_config["num_classes"],
    input_shape=tuple(model_config["input_shape"]),
    rngs=cfg.seed,
  )
  tc = dict(epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr, lr_step=cfg.lr_step)
  m, hist = training.train(
    cfg.seed,
    m,
    data,
    training.TrainConfig(sigma=sigma, **tc),
    eval_data=eval_data,
    workdir=workdir,
    model_config=model_config,
    progress=False,
  )
  return m, hist


def _summary(path: str, seconds: float) -> dict:
  from rsjax.runs import io

  r = io.read_certify(path)
  correct = np.asarray(r.correct, bool)
  out = {"certified_accuracy": certified_curve(correct, r.radius, RADII, predict=r.predict)}
  out["seconds"] = seconds
  if "sigma_index" in r.extra:
    k = np.asarray(r.extra["sigma_index"], np.int64)
    out["chosen"] = {str(i): int((k == i).sum()) for i in (-1, 0, 1)}
  return out


def run(cfg: Config, log=print) -> dict:
  import jax

  from rsjax import models
  from rsjax.dual.training import estimator_targets

  t_all = time.perf_counter()
  train, test, _ = load_splits(cfg.dataset, cfg.skip)
  (x, y), (xt, yt) = train.arrays(), test.arrays()
  os.makedirs(cfg.out, exist_ok=True)
  os.makedirs(cfg.runs, exist_ok=True)
  mcfg = cfg.model_config(train.input_shape)
  cert_kw = dict(dataset=test, skip=cfg.skip, n0=cfg.n0, n=cfg.n, alpha=cfg.alpha, seed=cfg.seed)
  rows, experts, dirs = {}, [], []
  for s in cfg.sigmas:
    d = os.path.join(cfg.out, f"expert_{s:g}")
    m, _ = _train(cfg, d, mcfg, (x, y), s, (xt, yt))
    experts.append(models.to_apply_fn(m))
    dirs.append(d)
    t0 = time.perf_counter()
    path = os.path.join(cfg.runs, f"cohen_{s:g}.tsv")
    certify_run(path, m, d, sigma=s, inputs_per_call=10, **cert_kw)
    rows[f"cohen_{s:g}"] = _summary(path, time.perf_counter() - t0)
    log(f"sigma {s:g}: {rows[f'cohen_{s:g}']}")
  t0 = time.perf_counter()
  key = jax.random.key(cfg.seed)
  targets = estimator_targets(key, experts, cfg.sigmas, x, y, draws=cfg.draws)
  t_eval = estimator_targets(jax.random.fold_in(key, 1), experts, cfg.sigmas, xt, yt)
  share = {f"{s:g}": float(np.mean(targets == k)) for k, s in enumerate(cfg.sigmas)}
  est_dir = os.path.join(cfg.out, f"estimator_{cfg.sigma_estimator:g}")
  est_cfg = {**mcfg, "num_classes": len(cfg.sigmas), "dual_sigmas": list(cfg.sigmas)}
  est, hist = _train(cfg, est_dir, est_cfg, (x, targets), cfg.sigma_estimator, (xt, t_eval))
  log(f"estimator: targets {share}, last epoch {hist[-1] if hist else None}")
  t_train = time.perf_counter() - t0
  spec = ",".join(f"{s:g}:{repo_path(d)}" for s, d in zip(cfg.sigmas, dirs, strict=True))
  t0 = time.perf_counter()
  path = os.path.join(cfg.runs, "dual.tsv")
  certify_run(
    path, est, est_dir, sigma=cfg.sigma_estimator, method="dual", inputs_per_call=10,
    options={"dual_experts": spec}, **cert_kw,
  )  # fmt: skip
  rows["dual"] = _summary(path, time.perf_counter() - t0)
  log(f"dual: {rows['dual']}")
  curves = [rows[f"cohen_{s:g}"]["certified_accuracy"] for s in cfg.sigmas]
  envelope = {r: max(c[r] for c in curves) for r in curves[0]}
  return dict(
    config=dataclasses.asdict(cfg) | {"out": repo_path(cfg.out), "runs": repo_path(cfg.runs),
                                      "results": repo_path(cfg.results)},
    rows=rows,
    envelope=envelope,
    estimator_targets=share,
    # Forward passes per input over one smoothed classifier's (the estimator draws n0 + n too);
    # wall times are not compared: a resumed run certifies nothing again.
    cost={"forward_passes_ratio": 2 * (cfg.n0 + cfg.n) / (cfg.n0 + cfg.n)},
    seconds={"estimator_training": t_train, "total": time.perf_counter() - t_all},
  )  # fmt: skip


def plot(result: dict, path: str) -> None:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(5, 3.5))
  curves = {k: v["certified_accuracy"] for k, v in result["rows"].items()}
  curves["envelope"] = result["envelope"]
  for name, c in curves.items():
    ax.plot([float(r) for r in c], list(c.values()), label=name,
            ls="--" if name == "envelope" else "-")  # fmt: skip
  ax.set_xlabel("radius (L2)")
  ax.set_ylabel("certified accuracy")
  ax.legend()
  save_figure(fig, path, 120)


def main(argv=None) -> int:
  cfg = sigmas_config(__doc__, get_config, argv)
  result = run(cfg, log=lambda m: print(m, flush=True))
  save_results(result, cfg.results, plot)
  return 0


if __name__ == "__main__":
  sys.exit(main())
