"""Serialized randomized smoothing (SRS) against standard RS for a DEQ on MNIST.

Gao et al. (NeurIPS 2024), Table 1 in spirit: a deep equilibrium model trained
with Gaussian noise, certified with

* standard RS, every sample solved from z = 0 with 30 Anderson steps ("30A");
* SRS with 1 and 3 Anderson or Broyden steps per chunk ("SRS-1A", "SRS-3A",
  "SRS-1B", "SRS-3B"; full mode has all four, quick mode the A rows): parallel
  chains warm-started from the previous chunk's fixed points, a 10-step warm-up
  chunk of the same solver, and the correlation-eliminated two-stage
  certificate in the paper's form, whose check samples are solved with the same
  30A solver, so all rows certify the same classifier (the DEQ solved with 30A
  from z = 0). One step of either solver is one plain step, so SRS-1A and
  SRS-1B differ only in their warm-up chunk.

Same held-out images, same key (standard RS and SRS see the same noisy inputs),
images certified one at a time (as in the paper); seconds per image exclude the
first call (compilation), which is reported separately. ``f_evals_per_image``
counts evaluations of the equilibrium map, a hardware-independent cost, and
``solver_steps_per_sample`` divides it by the ``n0 + N`` samples. For SRS,
``check_f_eval_share`` is the share of those evaluations spent in the m 30A
check solves and ``check_time_share`` the measured share of the estimation
time (``srs_sample`` with and without checks on ``share_images`` images; the
chains and the check solves of an image run in one compiled program).

Model: ``rsjax.deq.DEQClassifier`` (single-scale MDEQ-style block, 16 channels
at 14x14, flatten head, 25k parameters), trained here on the embedded
``mnist5k`` train split (4,000 real MNIST digits) with Gaussian noise
sigma (one model per sigma) through ``rsjax.training.train``: SGD, implicit
gradients (8 Anderson steps forward and backward), the Jacobian regularizer
(weight 2.0, as in MDEQ) and the solver's residual and steps in the training
history. Models and per-image rows live in ``runs/srs_deq_<quick|full>_seed<s>``:
rerunning the same command resumes (training from its last epoch, certification
from the first image without a row), so the full mode can run in pieces.

Commands::

  python experiments/srs_deq.py --quick   # ~20 min on 2 CPU cores, training included
  python experiments/srs_deq.py           # full: hours; stop and rerun to resume
  python experiments/srs_deq.py --sigmas 0.25 --images 20   # a piece of the full run
      # (its first 20 images at sigma 0.25; results/srs_deq_full_sigma0.25_first20.json)

``--quick`` uses SMALL settings: 5 training epochs, 50 test images (every 20th
of the 1,000 held-out digits), n0 = 100, N = 2,000, m = 200 check samples,
100 chains, alpha = 0.001. With m = 200 the mismatch budget caps p_lower at
0.947 (``rsjax.deq.max_certifiable_radius``: R <= 0.81 at sigma = 0.5), and
N = 2,000 caps standard RS at R = 1.36, so the large radii are not comparable
to the paper's N = 10,000. Without ``m`` in the config, m is chosen per run by
``rsjax.deq.min_check_samples`` as the smallest m whose cap reaches
``cap_sigmas * sigma``; both caps are written to the JSON.

Output: ``results/srs_deq_quick.json`` (``--quick``) or
``results/srs_deq_full.json``, and a certified-accuracy plot next to it
(``.png``). Full mode: sigma 0.25 and 0.5, 20 epochs, 200 images (every 5th),
n0 = 100, N = 10,000, alpha = 0.001, 400 chains, m = 420 per sigma from the
mismatch budget (the smallest m whose cap reaches 2 sigma; the paper uses 400,
which caps the paper-form radius at 1.98 sigma). The whole full mode has not
run (about 10.5 CPU-hours here: 95 s per image for the five rows, 400 images).

A piece of it ran: ``python experiments/srs_deq.py --sigmas 0.25 --images 20``
(2026-11-23, fresh clone at cce99da, 2 idle cores, 38 min 10 s with the DEQ
trained beforehand in 18 min 34 s; ``results/srs_deq_full_sigma0.25_first20.json``
and ``.png``), the first 20 of the full run's 200 images at sigma 0.25, m = 420
(SRS cap R <= 0.5001), full settings otherwise. The DEQ (25,242 parameters)
reaches noisy held-out accuracy 0.954 with 30A from z = 0; the ResNet of the same
size (24,967 parameters, same recipe) 0.980::

                  s/image  f-evals  speed-up  steps/   certified accuracy at radius
                                              sample   0     0.125 0.25  0.375 0.4375 0.5   0.75
  standard-30A    59.64   303,000    1.0x     30.0    0.95  0.90  0.85  0.85  0.85   0.85  0.80
  SRS-1A           7.88    27,200    7.6x      2.7    0.90  0.90  0.85  0.85  0.80   0.75  0.00
  SRS-3A          11.31    46,400    5.3x      4.6    0.95  0.90  0.85  0.85  0.85   0.70  0.00
  SRS-1B           6.72    27,200    8.9x      2.7    0.90  0.90  0.85  0.85  0.80   0.75  0.00
  SRS-3B           9.32    46,400    6.4x      4.6    0.95  0.90  0.85  0.85  0.85   0.70  0.00

  check solves: 46% of the f-evals (1A/1B, agreement 0.992) and 27% (3A/3B,
  agreement 1.000); 61-65% and 44-52% of the measured estimation time

On these 20 images SRS-3B is 6.4x faster than standard 30A and has the same
certified accuracy at every radius below the cap (0 to 0.4375 on the grid of
sigma/16 steps). At the cap itself, r = 0.5, it loses 3 of the 20 images: m = 420
is the smallest m whose cap reaches 2 sigma, so r = 2 sigma needs perfect
agreement and a top-class count near N. A cap some way above the largest radius
reported (``cap_sigmas`` > 2, a larger m) would close that at the cost of more
check solves. Twenty images are 5 points each: the 1-point goal needs the full
run.


Numbers produced (``--quick`` from a fresh clone at 2bfff8a, 2026-11-23, seed 0,
1 CPU device on 2 idle cores, 18 min 54 s wall, 1,128 s in the script; training
5 epochs through ``rsjax.training.train``: noisy test accuracy from z = 0 0.942
with 30A, 0.940 with 3A, 0.918 with 1A), the run in ``results/srs_deq_quick.json``::

                  s/image  f-evals  speed-up   certified accuracy at radius
                                               0     0.125 0.25  0.375 0.5   0.625 0.75  0.875 1.0   1.25
  standard-30A    11.89    63,000    1.0x     0.96  0.96  0.88  0.80  0.76  0.74  0.72  0.68  0.60  0.42
  SRS-1A           1.83     9,900    6.5x     0.94  0.90  0.80  0.74  0.70  0.68  0.54  0.00  0.00  0.00
  SRS-3A           3.05    13,700    3.9x     0.96  0.92  0.82  0.78  0.74  0.68  0.58  0.00  0.00  0.00

  SRS-1A: SRS/30A agreement on the check samples 0.973, mean mismatch bound 0.089,
          check solves 61% of the f-evals and 62% of the estimation time
  SRS-3A: agreement 0.997, mean mismatch bound 0.048, check solves 44% of the
          f-evals and 51% of the time

What this shows, honestly: SRS-1A is 6.5x faster per image than standard 30A
(the wall clock follows the f-eval ratio, 6.4x), near the paper's ~7x, but the
accuracy cost is larger than the paper's one point: 0-2 points at radius 0,
6-8 at 0.25 and 14-18 at 0.75, and nothing certified beyond the mismatch cap
(R <= 0.81). Two causes: (1) with m = 200 the mismatch bound alone gives
r <= (alpha/2)^(1/m) ~ 0.96, so p_lower <= 0.947 and R <= 0.81 even with
perfect agreement (full mode uses N = 10,000 and m = 420); (2) where the
chains do agree (3A: 99.7%), the two-stage bound still pays for the mismatch
upper bound (mean 0.048), which lowers p_lower on every image, so the
middle radii lose points even without disagreement. The check solves are half
of SRS's cost at m = 200, so a larger m (needed for the larger radii) lowers the
speed-up: the trade-off ``rsjax.deq.max_certifiable_radius`` makes explicit.
Timings vary by about 20% with machine load.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import time
import types

from flax import nnx
import jax
import numpy as np

from _common import RESULTS, ROOT  # first: puts the repository on sys.path
import _srs_rows as rows_lib
import rsjax
from rsjax import data, deq, metrics, stats


@dataclasses.dataclass(frozen=True)
class Config:
  models: tuple = (("deq", (0.25, 0.5)), ("mdeq", (0.25,)))  # (model kind, its sigmas)
  channels: int = 16
  mdeq_channels: tuple[int, int] = (8, 16)  # the MDEQ's two streams (14x14 and 7x7)
  train_steps: int = 8
  epochs: int = 20
  batch: int = 64
  lr: float = 0.05
  jac_weight: float = 2.0
  images_every: int = 5
  n0: int = 100
  n: int = 10_000
  m: int | None = None  # None: the smallest m whose cap reaches cap_sigmas * sigma
  cap_sigmas: float = 2.2
  chains: int = 400
  alpha: float = 0.001
  standard: str = "30A"
  warmup_steps: int = 10
  srs: tuple[str, ...] = ("1A", "3A", "1B", "3B")
  block: int = 10  # images per model and sigma in one round (all of them progress together)
  share_images: int = 2  # images on which the time share of the check solves is measured
  resnet: bool = False  # also train a ResNet of the DEQ's size (its noisy accuracy)
  train_size: int | None = None  # None: all 4,000 training digits
  max_images: int | None = None  # None: every images_every-th held-out digit; K: the first K
  seed: int = 0

  def runs(self) -> list[tuple[str, float]]:
    """``(kind, sigma)`` pairs in the order a round visits them."""
    pairs = [(k, s) for k, sigmas in self.models for s in sigmas]
    return sorted(pairs, key=lambda p: (p[1], p[0]))


RUNS = os.path.join(ROOT, "runs")


def get_config(quick: bool = False) -> Config:
  """The settings of one run (the numbers they produced are in the module docstring).

  Commands::

    python experiments/srs_deq.py --quick   # get_config(True): results/srs_deq_quick.json
    python experiments/srs_deq.py --full    # get_config(False): results/srs_deq_full.json

  Args:
    quick: the DEQ at sigma 0.5 only, 5 epochs, 50 images, N = 2,000, m = 200, 100
      chains, SRS-1A and SRS-3A (~15 min on 2 cores) instead of the DEQ at sigma 0.25
      and 0.5 and the MDEQ at 0.25, 20 epochs, 200 images, N = 10,000, m from the
      mismatch budget (744: the smallest m whose cap reaches 2.2 sigma), 400 chains,
      SRS-1A/3A/1B/3B.
  """
  if quick:
    return Config(models=(("deq", (0.5,)),), epochs=5, images_every=20, n=2_000, m=200,
                  chains=100, srs=("1A", "3A"), resnet=True, block=50)
  return Config()


def check_samples(cfg: Config, sigma: float) -> int:
  """The run's number of SRS check samples: ``cfg.m``, or from the mismatch budget."""
  if cfg.m is not None:
    return cfg.m
  return deq.min_check_samples(cfg.cap_sigmas * sigma, cfg.n, cfg.alpha, sigma)


def _noisy_held_out(cfg: Config, sigma: float, held_out) -> np.ndarray:
  """The held-out digits under one fixed draw of Gaussian noise (the DEQ and the ResNet see
  the same draw): float32 ``[n, 28, 28, 1]``."""
  noise = sigma * np.random.default_rng(cfg.seed).standard_normal(held_out[0].shape)
  return (held_out[0] + noise).astype(np.float32)


def _train(cfg: Config, sigma: float, model, train, held_out, workdir: str, **kw):
  """The experiment's recipe through ``rsjax.training.train``: SGD, the lr cut by 5 at half
  of the epochs, Gaussian noise ``sigma``; resumes from ``workdir``."""
  tcfg = rsjax.training.TrainConfig(sigma=sigma, epochs=cfg.epochs, batch_size=cfg.batch,
                                    lr=cfg.lr, lr_step=max(cfg.epochs // 2, 1), gamma=0.2,
                                    eval_batch_size=250)
  n = len(train.x) if cfg.train_size is None else cfg.train_size
  return rsjax.training.train(cfg.seed, model, (train.x[:n], train.y[:n].astype(np.int32)), tcfg,
                              eval_data=held_out, workdir=workdir, progress=False,
                              keep_checkpoints=1, **kw)


MODEL_KWARGS = {"deq": lambda cfg: {"channels": cfg.channels},
                "mdeq": lambda cfg: {"channels": list(cfg.mdeq_channels)}}


def train_model(cfg: Config, sigma: float, workdir: str, train, held_out, log, kind: str = "deq"):
  """Gaussian-noise training through ``rsjax.training.train`` (implicit gradients,
  the Jacobian regularizer, solver residual and steps logged); resumes from ``workdir``.
  ``kind``: ``"deq"`` (single stream) or ``"mdeq"`` (two resolutions)."""
  spec = {"model": kind, "num_classes": 10, "input_shape": list(train.x.shape[1:]),
          "model_kwargs": {**MODEL_KWARGS[kind](cfg), "groups": 4, "steps": cfg.train_steps,
                           "jac_weight": cfg.jac_weight}}
  model = rsjax.models.create_model(kind, num_classes=10, input_shape=train.x.shape[1:],
                                    rngs=cfg.seed, **spec["model_kwargs"])
  model, history = _train(cfg, sigma, model, train, held_out, workdir, model_config=spec,
                          on_epoch_end=lambda e: log(json.dumps(e)))
  # Accuracy under one draw of noise with cheap and full solvers from z = 0.
  deq_fn, variables = deq.to_deq_fn(model)
  run = jax.jit(deq_fn, static_argnums=3)
  noisy = _noisy_held_out(cfg, sigma, held_out)
  acc = {}
  for label in sorted({cfg.standard, *cfg.srs}):
    logits, res = run(variables, noisy, None, deq.as_solver_config(label))
    acc[label] = {"noisy_acc": float(np.mean(np.asarray(logits).argmax(1) == held_out[1])),
                  "residual": float(np.mean(res.residual))}
  return model, history, acc


def train_resnet(cfg: Config, sigma: float, workdir: str, train, held_out) -> dict:
  """The standard network next to the DEQ: a ResNet of about the DEQ's size (one basic block
  per stage, widths 9/18/36: 25k parameters) with the DEQ's training recipe and noise; its
  accuracy on the same noisy held-out digits. Resumes from ``workdir``."""
  spec = {"stage_sizes": (1, 1, 1), "widths": (9, 18, 36), "normalize": "mnist"}
  model = rsjax.models.BasicResNet(input_shape=train.x.shape[1:], num_classes=10,
                                   rngs=nnx.Rngs(cfg.seed), **spec)
  model, history = _train(cfg, sigma, model, train, held_out, workdir)
  apply_fn, params = rsjax.models.to_apply_fn(model)
  logits = apply_fn(params, _noisy_held_out(cfg, sigma, held_out))
  return {"model": "BasicResNet " + json.dumps(spec), "num_params": rsjax.models.count_params(model),
          "noisy_acc": float(np.mean(np.asarray(logits).argmax(1) == held_out[1])),
          "clean_acc": float(history[-1]["clean_acc"]) if history else None}


def check_time_share(cfg: Config, model, sigma: float, variant: str, x, ids) -> float:
  """Measured share of SRS estimation time spent in the m check solves (30A from z = 0):
  the same ``srs_sample`` call with and without check samples, after compilation."""
  m = check_samples(cfg, sigma)
  deq_fn, variables = deq.to_deq_fn(model)
  settings = rsjax.Sampling(n0=cfg.n0, n=cfg.n, alpha=cfg.alpha, batch_size=cfg.chains)
  times = {}
  for mm in (0, m):
    call = lambda i: deq.srs_sample(  # noqa: E731
        jax.random.key(cfg.seed + 1), deq_fn, variables, x[i:i + 1], sigma=sigma,
        num_classes=10, num=cfg.n, config=rows_lib.srs_config(cfg, variant, mm),
        settings=settings, check_key=jax.random.key(cfg.seed + 2), ids=ids[i:i + 1])
    call(0)  # compile
    t0 = time.perf_counter()
    for i in range(cfg.share_images):
      call(i)
    times[mm] = time.perf_counter() - t0
  return float(max(0.0, 1.0 - times[0] / times[m]))


def _names(cfg: Config) -> dict[str, str]:
  return {v: (f"standard-{v}" if v == cfg.standard else f"SRS-{v}") for v in (cfg.standard,
                                                                              *cfg.srs)}


def _row_settings(cfg: Config, kind: str, sigma: float, variant: str, m: int, epoch) -> dict:
  """What fixes a rows file's results (its header): a file of other settings is refused."""
  return {"model": kind, "epoch": epoch, "sigma": sigma, "variant": variant, "n0": cfg.n0,
          "n": cfg.n, "m": m, "alpha": cfg.alpha, "chains": cfg.chains,
          "warmup_steps": cfg.warmup_steps, "standard": cfg.standard, "seed": cfg.seed}


def _report(cfg: Config, ids, setups: dict, out_path: str, t_start: float) -> dict:
  """The JSON of everything certified so far (methods compared on the images every method
  of a (model, sigma) has done) and its plot."""
  names = _names(cfg)
  report = {"config": dataclasses.asdict(cfg), "dataset": "mnist5k (train 4000 / test 1000)",
            "images": [int(i) for i in ids], "radii": list(rows_lib.RADII), "runs": {},
            "jax": jax.__version__, "devices": [str(d) for d in jax.devices()]}
  curves, done_all = {}, True
  for tag, st in setups.items():
    by_variant = {v: {r["id"]: r for r in rows_lib.read_rows(st.paths[v], st.headers[v])}
                  for v in names}
    common = [int(i) for i in ids if all(int(i) in rows for rows in by_variant.values())]
    done_all &= len(common) == len(ids)
    results = {}
    for v, name in names.items():
      rows = [by_variant[v][i] for i in common]
      results[name] = rows_lib.summarize(cfg, rows, v, st.m)
      if len(common) == len(ids) and v != cfg.standard and cfg.share_images:
        results[name]["check_time_share"] = st.share.setdefault(v, check_time_share(
            cfg, st.model, st.sigma, v, st.x, ids))
      curves[f"{tag} {name}"] = types.SimpleNamespace(
          correct=np.array([r["predict"] == r["label"] for r in rows], bool),
          radius=np.array([r["radius"] for r in rows]), predict=np.array([r["predict"] for r in rows]))
    if common:
      rows_lib.add_speedups(results, names[cfg.standard])
    report["runs"][tag] = {
        "model": st.kind, "sigma": st.sigma, "images_done": len(common), "images_total": len(ids),
        "n0": cfg.n0, "n": cfg.n, "m": st.m, "alpha": cfg.alpha,
        "srs_radius_cap": deq.max_certifiable_radius(cfg.n, st.m, cfg.alpha, st.sigma),
        "standard_radius_cap": float(stats.max_radius(cfg.n, cfg.alpha, st.sigma)),
        "num_params": rsjax.models.count_params(st.model), "train_history": st.history,
        "noisy_accuracy_from_zero": st.acc, "resnet_same_size": st.resnet, "results": results}
  for kind, sigma in cfg.runs():  # not reached yet in this call
    tag = f"{kind} sigma={sigma:g}"
    if tag not in report["runs"]:
      done_all = False
      report["runs"][tag] = {"model": kind, "sigma": sigma, "images_done": 0,
                             "images_total": len(ids), "results": {}}
  report["complete"] = done_all
  report["seconds_this_call"] = time.perf_counter() - t_start
  os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
  tmp = out_path + ".tmp"
  with open(tmp, "w") as fh:
    json.dump(report, fh, indent=1)
  os.replace(tmp, out_path)
  if any(len(c.radius) for c in curves.values()):
    rsjax.plots.plot_certified_accuracy(os.path.splitext(out_path)[0] + ".png", curves,
                                        title="SRS vs standard RS (DEQ and MDEQ, MNIST)")
  return report


def run(cfg: Config, out_path: str, workdir: str, log=print, max_minutes: float | None = None,
        report_only: bool = False):
  """Trains (or reloads) each model, certifies with every method in rounds of ``cfg.block``
  images per (model, sigma), rewrites the JSON and plot after every block. Rerunning the
  same command resumes where it stopped; ``max_minutes`` stops after the image in progress
  once that much time has passed; ``report_only`` writes the JSON and plot of the rows
  there are and certifies (and trains) nothing."""
  t_start = time.perf_counter()
  train = data.load("mnist5k", "train")
  test = data.load("mnist5k", "test")
  ids = np.arange(0, len(test.x), cfg.images_every)[:cfg.max_images]
  x_cert, y_cert = test.x[ids], test.y[ids].astype(np.int64)
  held_out = (test.x[:500], test.y[:500].astype(np.int32))
  os.makedirs(workdir, exist_ok=True)
  setups = {}

  def setup(kind, sigma):  # trains (or reloads) a model when its first round comes
    tag = f"{kind} sigma={sigma:g}"
    if tag in setups:
      return tag, setups[tag]
    wd = os.path.join(workdir, f"{kind}_sigma{sigma:g}")
    model, history, acc = train_model(cfg, sigma, os.path.join(wd, "model"), train, held_out,
                                      log, kind=kind)
    resnet = None
    if cfg.resnet and kind == "deq":
      resnet = train_resnet(cfg, sigma, os.path.join(wd, "resnet"), train, held_out)
      shutil.rmtree(os.path.join(wd, "resnet", "checkpoints"), ignore_errors=True)
      log(f"{tag} ResNet of the same size: " + json.dumps(resnet))
    m = check_samples(cfg, sigma)
    epoch = history[-1]["epoch"] if history else None
    headers = {v: _row_settings(cfg, kind, sigma, v, m, epoch) for v in _names(cfg)}
    paths = {v: os.path.join(wd, f"rows_{name}.jsonl") for v, name in _names(cfg).items()}
    setups[tag] = types.SimpleNamespace(kind=kind, sigma=sigma, model=model, history=history,
                                        acc=acc, resnet=resnet, m=m, headers=headers,
                                        paths=paths, x=x_cert, share={})
    return tag, setups[tag]

  def trained(kind, sigma):  # its model has finished training (loading it is cheap)
    path = os.path.join(workdir, f"{kind}_sigma{sigma:g}", "model", "history.json")
    if not os.path.exists(path):
      return False
    with open(path) as fh:
      return len(json.load(fh)) >= cfg.epochs

  for kind, sigma in cfg.runs():
    if trained(kind, sigma):
      setup(kind, sigma)
  compiled, stop = set(), report_only
  report = _report(cfg, ids, setups, out_path, t_start)
  for start in range(0, len(ids), cfg.block):
    for kind, sigma in cfg.runs():
      if stop:
        break
      tag, st = setup(kind, sigma)
      deq_fn, variables = deq.to_deq_fn(st.model)
      done = {v: {r["id"] for r in rows_lib.read_rows(st.paths[v], st.headers[v])}
              for v in st.paths}
      for i in range(start, min(start + cfg.block, len(ids))):
        if max_minutes is not None and time.perf_counter() - t_start > 60 * max_minutes:
          stop = True
          log(f"stopping after {max_minutes} min; rerun the same command to continue")
          break
        for v, name in _names(cfg).items():
          if int(ids[i]) in done[v]:
            continue
          row = rows_lib.certify_image(cfg, deq_fn, variables, st.sigma, v, st.m,
                                       x_cert[i:i + 1], y_cert[i], ids[i],
                                       (tag, v) not in compiled)
          compiled.add((tag, v))
          rows_lib.append_row(st.paths[v], st.headers[v], row)
          log(f"{tag} {name} image {int(ids[i])}: radius {row['radius']:.3f} "
              f"({row['seconds']:.1f}s, cpu {row['cpu_seconds']:.1f}s)")
      report = _report(cfg, ids, setups, out_path, t_start)
      log("progress: " + ", ".join(f"{t}: {r['images_done']}/{r['images_total']}"
                                   for t, r in report["runs"].items()))
  log(f"wrote {out_path} ({time.perf_counter() - t_start:.0f}s in this call)")
  return report


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  mode = parser.add_mutually_exclusive_group()
  mode.add_argument("--quick", action="store_true", help="small settings (~15 min on 2 CPUs)")
  mode.add_argument("--full", action="store_true", help="the full run (the default): resumes")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--sigmas", type=float, nargs="+", default=None,
                      help="only these sigmas (default: the mode's)")
  parser.add_argument("--images", type=int, default=None,
                      help="only the first K of the mode's images (a piece of a run: the rows "
                           "are the run's, so the whole run resumes from them)")
  parser.add_argument("--max-minutes", type=float, default=None,
                      help="stop after the image in progress once this much time has passed")
  parser.add_argument("--report", action="store_true",
                      help="only write the JSON and plot of the rows there are")
  parser.add_argument("--out", default=None, help="output JSON path")
  parser.add_argument("--workdir", default=None,
                      help="models and per-image rows (resume: rerun the same command)")
  args = parser.parse_args(argv)
  cfg = dataclasses.replace(get_config(args.quick), seed=args.seed, max_images=args.images)
  if args.sigmas:
    cfg = dataclasses.replace(cfg, models=tuple(
        (k, tuple(s for s in sig if s in args.sigmas)) for k, sig in cfg.models))
  tag = "quick" if args.quick else "full"
  if args.images is not None or args.sigmas:  # a piece of the run: its own JSON, the run's rows
    tag += "".join(f"_sigma{s:g}" for s in sorted({s for _, s in cfg.runs()})) + (
        f"_first{args.images}" if args.images is not None else "")
  out = args.out or os.path.join(RESULTS, f"srs_deq_{tag}.json")
  # The full run's models and rows are committed next to its results (a fresh clone resumes).
  default_wd = (os.path.join(RESULTS, "srs_deq_full") if not args.quick and args.seed == 0
                else os.path.join(RUNS, f"srs_deq_{'quick' if args.quick else 'full'}_seed{args.seed}"))
  run(cfg, out, args.workdir or default_wd, max_minutes=args.max_minutes, report_only=args.report,
      log=lambda s: print(time.strftime("%H:%M:%S"), s, flush=True))


if __name__ == "__main__":
  main()
