"""Serialized randomized smoothing (SRS) against standard RS for DEQs on MNIST.

Gao et al. (NeurIPS 2024), Table 1 in spirit: deep equilibrium models trained
with Gaussian noise, certified with

* standard RS, every sample solved from z = 0 with 30 Anderson steps ("30A");
* SRS with 1 and 3 Anderson or Broyden steps per chunk ("SRS-1A", "SRS-3A",
  "SRS-1B", "SRS-3B"): 400 parallel chains warm-started from the previous
  chunk's fixed points, a 10-step warm-up chunk of the same solver, and the
  correlation-eliminated two-stage certificate in the paper's form, whose m
  check samples are solved with 30A from z = 0, so all rows certify the same
  classifier. One step of either solver is one plain step, so SRS-1A and
  SRS-1B differ only in their warm-up chunk.

Every (model, sigma, method) is one run of ``rsjax.app.launch.run`` through
``_common.certify_run``, which ``rsjax verify`` accepts: the registry's ``deq-standard``
(30 Anderson steps) or ``srs`` with the options of its variant (``_srs_config.method_options``:
``deq_solver``/``deq_steps`` of the chains, ``deq_warmup_solver``/``deq_warmup_steps`` of
their first chunk, ``srs_m`` checks of ``srs_check_steps`` = 30 Anderson steps, the paper's
correction); the chains are the run's batch size (400). Same held-out images for every run,
one image per call as in the paper. Each run's key is the seed folded with 1 and its claim
(the method and options among it), so the runs draw different noise: a method's losses to
30A image by image include Monte-Carlo noise (with the old rows' one key they did not).
Seconds per image: the median of a run's ``time`` column (wall seconds of each one-image
call; the median leaves out the first call of a process, which compiles); runs record no CPU
time. ``f_evals_per_image`` counts evaluations of the equilibrium map from the settings, a
hardware-independent cost.

Models (``rsjax.training.train``: SGD, implicit gradients with 8 Anderson
steps, the Jacobian regularizer, 20 epochs on the 4,000 embedded ``mnist5k``
training digits): ``rsjax.models.DEQClassifier`` (one stream, 16 channels at
14x14, 25,242 parameters) at sigma 0.25 and 0.5, and the multiscale
``rsjax.models.MDEQClassifier`` (streams of 8 channels at 14x14 and 16 at 7x7,
fused every step; 30,018 parameters), the paper's model class, at sigma 0.25.

The cap. With N = 10,000 and alpha = 0.001 standard RS certifies at most
3.20 sigma (0.80 at sigma 0.25). SRS's m check samples cap it lower
(``rsjax.srs.max_certifiable_radius``); m is the smallest one whose cap
reaches ``cap_sigmas`` = 2.2 sigma: m = 744, cap 0.55 at sigma 0.25 and 1.10
at 0.5. That is above every reported radius (0, 0.25, 0.5, 0.75, 1.0) at
sigma 0.5 and above 0.5 at sigma 0.25; 0.75 = 3 sigma there would take
m = 27,468 check solves, more than standard RS's whole cost, so it is
reported above the cap. The margin over 2 sigma is deliberate: at m = 420
(cap exactly 2 sigma) the first 20 images lost 3 at r = 0.5. Each check
costs a 30A solve, so m bounds the speed-up: SRS-3B's f-evals are 56,120 per
image (22,320 in the checks), 5.4x fewer than 30A's 303,000.

Cost (issue 29): each pass over an image is one compiled program (2 launches per image
and method, warm start carried in the scan); the time went to Anderson's m x m Gram matrix,
recomputed every step (31 of 69 ms of a 30A step on 400 samples; the map: 21 ms). It is now
updated one row per step, 1A is the plain step it equals, and checks run in equal batches.
CPU seconds per image (m = 744) before -> after: 30A 54.3 -> 27.3, SRS-1A 7.3 -> 4.1, SRS-3A
9.6 -> 5.3, SRS-1B 5.5 -> 4.0, SRS-3B 9.1 -> 5.6 (its speed-up: 6.0x -> 4.9x). Labels of
30A, 10A, 3A and 3B equal the old code's on 4,000 noisy samples each (logits within 6e-6).

Runs in pieces: the full run's models (final checkpoint) are committed in
``results/srs_deq_full/<model>_sigma<sigma>/model``, its runs go beside them
(``<method>.tsv`` with ``.run.json`` and ``.cert.jsonl``). ``--full`` trains a model when its
first round comes, certifies rounds of 10 images per (model, sigma) with every method (each
method's run resumed up to the round's last image), writes ``results/srs_deq_full_runs.json``
and ``.png`` (methods compared on the images all have) after each round that certified
something. ``--max-minutes`` stops before the next image; a killed run loses at most the image
in progress (``launch.run`` resumes after the rows written). tests/test_experiments.py requires
every committed run to verify complete.

Commands::

  python experiments/srs_deq.py --full --max-minutes 100   # a piece; rerun to continue
  # two pieces at once, one per core (XLA:CPU gains nothing from a second thread here:
  # 30A took 24.5 s per image on 2 threads, 24 s on 1); each writes its own JSON
  XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \
    taskset -c 0 python experiments/srs_deq.py --full --models deq --sigmas 0.25 &
  XLA_FLAGS=... taskset -c 1 python experiments/srs_deq.py --full --models deq --sigmas 0.5 &
  # one (model, sigma) on two cores: its methods split between two processes (30A costs about
  # as much as the four SRS variants together)
  XLA_FLAGS=... taskset -c 0 python experiments/srs_deq.py --full --models mdeq \
    --methods standard-30A &
  XLA_FLAGS=... taskset -c 1 python experiments/srs_deq.py --full --models mdeq \
    --methods SRS-1A SRS-3A SRS-1B SRS-3B &
  python experiments/srs_deq.py --full --report            # the JSON of the runs there are
  python experiments/srs_deq.py --quick                    # ~15 min, sigma 0.5, N = 2,000

``--quick``: 5 epochs, 50 images, N = 2,000, m = 200 (cap 0.81), 100 chains, SRS-1A and 3A.

Numbers produced (``--quick``, seed 0: ``results/srs_deq_quick.json`` from the runs in
``results/srs_deq_quick/deq_sigma0.5/``, 50 images; 773 s on 2 CPU cores shared with other
jobs, training included; seconds: median wall per image)::

             cert. acc. at r = 0 .25 .5 .75 1   ACR    s/image  speed-up  f-eval ratio
  30A        .96 .94 .76 .70 .60                0.947  5.93     1.0x      1.0x
  SRS-1A     .94 .78 .74 .54 0                  0.604  1.15     5.2x      6.4x
  SRS-3A     .96 .82 .74 .54 0                  0.622  1.55     3.8x      4.6x

Below the cap (0.81) SRS-1A loses 8 of 50 images at r = 0.25 and 8 at 0.75 to check samples
that disagree (check agreement 0.972; 1 more at r = 0 and 0.5); SRS-3A (agreement 0.996) loses
6 at 0.25 and 8 at 0.75 (4 to too few checks: m >= 507 would keep them, f-eval ratio 2.7x).

The full run: ``results/srs_deq_full_runs_deq_sigma0.25.json``, ``..._deq_sigma0.5.json`` and
``..._mdeq_sigma0.25.json`` (and ``.png``), one per piece, 200 images each; ``--full --report``
prints the table (DEQ 0.25 first, then DEQ 0.5 and the MDEQ on one core each, the MDEQ's last
150 images with its methods split over both cores by ``--methods``)::

                   cert. acc. 30A vs SRS-3B at r = 0/.25/.5/.75/1        ACR 30A / 1A / 3A / 1B / 3B
  DEQ sigma 0.25   .955 .930 .860 .785 0 vs .955 .925 .845 0 0           .704 / .496 / .499 / .496 / .499
  DEQ sigma 0.5    .945 .905 .860 .810 .720 vs .940 .905 .850 .770 .640  1.168 / .870 / .885 / .871 / .889
  MDEQ sigma 0.25  .955 .950 .910 .825 0 vs .955 .950 .900 0 0           .732 / .513 / .515 / .513 / .515

(0.75 is above SRS's cap 0.55 at sigma 0.25.) f-eval ratios 8.2x (1A/1B), 5.4x (3A/3B). Wall
speed-ups 1A/3A/1B/3B (median seconds per image; each piece beside another on the second
core): DEQ 0.25 7.7/5.1/7.6/4.5, DEQ 0.5 7.3/4.7/6.8/4.1, MDEQ 4.8/3.3/4.7/3.0 (its last SRS
rows beside a test suite on both cores: no measurement). The check solves take 33-44% of
SRS-3A/3B's wall time and 54-62% of 1A/1B's (``check_time_share``, measured after each run
completed). Issue 29's rows (one key for every method, no run records; removed when these runs
completed, in git history) measured 7.4-7.6x (1A), 5.0-5.1x (3A), 7.1-7.2x (1B) and 4.7-4.8x
(3B) on a quieter machine: SRS-3B misses 5x because the checks (744 x 30A) are 40% of its
f-evals, capping it at 5.4x, and Broyden's per-step work costs 5-8%.

Below the cap (0.55 / 1.10) SRS-3B loses to 30A, image by image: 1 image at r = 0.25 and 3 at
0.5 on the DEQ at 0.25 (3 to too few checks, 1 to another label); 1, 0, 2, 8 and 16 at r = 0
to 1 on the DEQ at 0.5 (at 1.0: 11 to checks that disagree, 2 to too few checks, 3 to labels);
2 at r = 0.5 on the MDEQ (both to too few checks). "Labels": SRS's prediction is not 30A's,
from warm-started chains or from the runs' different noise (each run draws its own).

Earlier numbers (previous solver code, m = 420), in git history: the first 20 images of
cce99da (SRS-3B 6.4x, 3 of 20 lost at r = 0.5); ``--quick`` at 2bfff8a (rows with one key for
every method, in git history: SRS-1A 6.5x, SRS-3A 3.9x; r = 0.25: 30A .88, 1A .80, 3A .82).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import time
import types
from collections.abc import Collection

import _srs_report as report_lib
import jax
import numpy as np
from _common import RESULTS, ROOT, strip_checkpoint_paths  # first: the repository on sys.path
from _srs_config import Config, check_samples, get_config, variant_names
from _srs_rows import certify_piece
from flax import nnx

import rsjax
from rsjax import data, training
from rsjax.records import spec as runspec

RUNS = os.path.join(ROOT, "runs")


def _noisy_held_out(cfg: Config, sigma: float, held_out) -> np.ndarray:
  """The held-out digits under one fixed draw of Gaussian noise (the DEQ and the ResNet see
  the same draw): float32 ``[n, 28, 28, 1]``."""
  noise = sigma * np.random.default_rng(cfg.seed).standard_normal(held_out[0].shape)
  return (held_out[0] + noise).astype(np.float32)


def _train(cfg: Config, sigma: float, model, train, held_out, workdir: str, **kw):
  """The experiment's recipe through ``rsjax.training.train``: SGD, the lr cut by 5 at half
  of the epochs, Gaussian noise ``sigma``; resumes from ``workdir``."""
  tcfg = training.TrainConfig(
    sigma=sigma,
    epochs=cfg.epochs,
    batch_size=cfg.batch,
    lr=cfg.lr,
    lr_step=max(cfg.epochs // 2, 1),
    gamma=0.2,
    eval_batch_size=250,
  )
  n = len(train.x) if cfg.train_size is None else cfg.train_size
  return training.train(
    cfg.seed,
    model,
    (train.x[:n], train.y[:n].astype(np.int32)),
    tcfg,
    eval_data=held_out,
    workdir=workdir,
    progress=False,
    keep_checkpoints=1,
    **kw,
  )


MODEL_KWARGS = {
  "deq": lambda cfg: {"channels": cfg.channels},
  "mdeq": lambda cfg: {"channels": list(cfg.mdeq_channels)},
}


def train_model(cfg: Config, sigma: float, workdir: str, train, held_out, log, kind: str = "deq"):
  """Gaussian-noise training through ``rsjax.training.train`` (implicit gradients,
  the Jacobian regularizer, solver residual and steps logged); resumes from ``workdir``.
  ``kind``: ``"deq"`` (single stream) or ``"mdeq"`` (two resolutions)."""
  spec = {
    "model": kind,
    "num_classes": 10,
    "input_shape": list(train.x.shape[1:]),
    "model_kwargs": {
      **MODEL_KWARGS[kind](cfg),
      "groups": 4,
      "steps": cfg.train_steps,
      "jac_weight": cfg.jac_weight,
    },
  }
  model = rsjax.models.create_model(
    kind, num_classes=10, input_shape=train.x.shape[1:], rngs=cfg.seed, **spec["model_kwargs"]
  )
  model, history = _train(
    cfg,
    sigma,
    model,
    train,
    held_out,
    workdir,
    model_config=spec,
    on_epoch_end=lambda e: log(json.dumps(e)),
  )
  strip_checkpoint_paths(workdir)  # the full run's checkpoints are committed
  # Accuracy under one draw of noise with cheap and full solvers from z = 0.
  deq_fn, variables = rsjax.models.to_deq_fn(model)
  run = jax.jit(deq_fn, static_argnums=3)
  noisy = _noisy_held_out(cfg, sigma, held_out)
  acc = {}
  for label in sorted({cfg.standard, *cfg.srs}):
    logits, res = run(variables, noisy, None, rsjax.models.as_solver_config(label))
    acc[label] = {
      "noisy_acc": float(np.mean(np.asarray(logits).argmax(1) == held_out[1])),
      "residual": float(np.mean(res.residual)),
    }
  return model, history, acc


def train_resnet(cfg: Config, sigma: float, workdir: str, train, held_out) -> dict:
  """The standard network next to the DEQ: a ResNet of about the DEQ's size (one basic block
  per stage, widths 9/18/36: 25k parameters) with the DEQ's training recipe and noise; its
  accuracy on the same noisy held-out digits. Resumes from ``workdir``."""
  spec = {"stage_sizes": (1, 1, 1), "widths": (9, 18, 36), "normalize": "mnist"}
  model = rsjax.models.BasicResNet(
    input_shape=train.x.shape[1:], num_classes=10, rngs=nnx.Rngs(cfg.seed), **spec
  )
  model, history = _train(cfg, sigma, model, train, held_out, workdir)
  apply_fn, params = rsjax.models.to_apply_fn(model)
  logits = apply_fn(params, _noisy_held_out(cfg, sigma, held_out))
  return {
    "model": "BasicResNet " + json.dumps(spec),
    "num_params": rsjax.models.count_params(model),
    "noisy_acc": float(np.mean(np.asarray(logits).argmax(1) == held_out[1])),
    "clean_acc": float(history[-1]["clean_acc"]) if history else None,
  }


def run(
  cfg: Config,
  out_path: str,
  workdir: str,
  rundir: str | None = None,
  log=print,
  max_minutes: float | None = None,
  report_only: bool = False,
  methods: Collection[str] | None = None,
):
  """Trains (or reloads) each model into ``workdir``, certifies each (model, sigma, method)
  as one run in ``rundir`` (default ``workdir``) in rounds of ``cfg.block`` images, and
  writes the JSON and plot at the start and after each round that certified something.
  Rerunning the same command resumes where the runs stop; ``max_minutes`` stops before the
  next image once that much time has passed; ``report_only`` writes the JSON and plot of
  the runs there are and certifies (and trains) nothing; ``methods`` (names such as
  ``"SRS-3B"``) certifies only those, so two processes can share one (model, sigma) (the
  JSON and plot compare every method on the images all have)."""
  t_start = time.perf_counter()
  deadline = math.inf if max_minutes is None else t_start + 60 * max_minutes
  rundir = rundir or workdir
  train = data.load("mnist5k", "train")
  test = data.load("mnist5k", "test")
  ids = np.asarray(runspec.declared_indices(len(test.x), skip=cfg.images_every))
  held_out = (test.x[:500], test.y[:500].astype(np.int32))
  os.makedirs(workdir, exist_ok=True)
  setups = {}

  def setup(kind, sigma):  # trains (or reloads) a model when its first round comes
    tag = f"{kind} sigma={sigma:g}"
    if tag in setups:
      return tag, setups[tag]
    wd = os.path.join(workdir, f"{kind}_sigma{sigma:g}")
    model, history, acc = train_model(
      cfg, sigma, os.path.join(wd, "model"), train, held_out, log, kind=kind
    )
    resnet = None
    if cfg.resnet and kind == "deq":
      resnet = train_resnet(cfg, sigma, os.path.join(wd, "resnet"), train, held_out)
      shutil.rmtree(os.path.join(wd, "resnet", "checkpoints"), ignore_errors=True)
      log(f"{tag} ResNet of the same size: " + json.dumps(resnet))
    rd = os.path.join(rundir, f"{kind}_sigma{sigma:g}")
    setups[tag] = types.SimpleNamespace(
      kind=kind,
      sigma=sigma,
      model=model,
      model_dir=os.path.join(wd, "model"),
      history=history,
      acc=acc,
      resnet=resnet,
      m=check_samples(cfg, sigma),
      paths={v: os.path.join(rd, f"{name}.tsv") for v, name in variant_names(cfg).items()},
      x=test.x[ids],
      share={},
    )
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
  stop = report_only
  report = report_lib.write_report(cfg, ids, setups, out_path, t_start)
  for start in range(0, len(ids), cfg.block):
    allowed = {int(i) for i in ids[: start + cfg.block]}
    for kind, sigma in cfg.runs():
      stop = stop or time.perf_counter() > deadline
      if stop:
        break
      tag, st = setup(kind, sigma)
      wrote = 0
      for v, name in variant_names(cfg).items():
        if methods is not None and name not in methods:
          continue
        t0 = time.perf_counter()
        new = certify_piece(cfg, st, v, test, allowed, deadline)
        wrote += new
        if new:
          log(f"{tag} {name}: {new} images in {time.perf_counter() - t0:.0f}s")
      if wrote:  # else the JSON and plot stand as they are
        report = report_lib.write_report(cfg, ids, setups, out_path, t_start)
        log(
          "progress: "
          + ", ".join(
            f"{t}: {r['images_done']}/{r['images_total']}" for t, r in report["runs"].items()
          )
        )
  if time.perf_counter() > deadline and not report["complete"]:
    log(f"stopped after {max_minutes} min; rerun the same command to continue")
  log("\n" + report_lib.table(report))
  log(f"wrote {out_path} ({time.perf_counter() - t_start:.0f}s; complete: {report['complete']})")
  return report


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  mode = parser.add_mutually_exclusive_group()
  mode.add_argument("--quick", action="store_true", help="small settings (~15 min on 2 CPUs)")
  mode.add_argument("--full", action="store_true", help="the full run (the default): resumes")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument(
    "--sigmas", type=float, nargs="+", default=None, help="only these sigmas (default: the mode's)"
  )
  parser.add_argument(
    "--models",
    nargs="+",
    choices=("deq", "mdeq"),
    default=None,
    help="only these models (default: the mode's); with --sigmas, lets two "
    "processes work on disjoint runs at once",
  )
  parser.add_argument(
    "--methods",
    nargs="+",
    default=None,
    help="certify only these methods (e.g. standard-30A SRS-1A): lets two processes share "
    "one (model, sigma); the JSON still compares them all",
  )
  parser.add_argument(
    "--max-minutes",
    type=float,
    default=None,
    help="stop before the next image once this much time has passed",
  )
  parser.add_argument(
    "--report", action="store_true", help="only write the JSON and plot of the runs there are"
  )
  parser.add_argument("--out", default=None, help="output JSON path")
  parser.add_argument(
    "--workdir",
    default=None,
    help="models and runs (resume: rerun the same command; default: see the docstring)",
  )
  args = parser.parse_args(argv)
  cfg = dataclasses.replace(get_config(args.quick), seed=args.seed)
  if args.sigmas:
    cfg = dataclasses.replace(
      cfg, models=tuple((k, tuple(s for s in sig if s in args.sigmas)) for k, sig in cfg.models)
    )
  unknown = set(args.methods or ()) - set(variant_names(cfg).values())
  if unknown:
    parser.error(f"--methods: no {sorted(unknown)} in {sorted(variant_names(cfg).values())}")
  if args.models:
    cfg = dataclasses.replace(
      cfg, models=tuple((k, sig) for k, sig in cfg.models if k in args.models)
    )
  tag = "quick" if args.quick else "full_runs"
  if args.sigmas or args.models:  # a piece: its own JSON (the runs are the whole run's)
    tag += "".join(f"_{k}" for k in (args.models or ())) + "".join(
      f"_sigma{s:g}" for s in sorted({s for _, s in cfg.runs()})
    )
  out = args.out or os.path.join(RESULTS, f"srs_deq_{tag}.json")
  # The full run's models and runs are committed in results/ (a fresh clone resumes); the
  # quick run's models stay in runs/, its runs go to results/srs_deq_quick/.
  mode = "quick" if args.quick else "full"
  workdir, rundir = args.workdir, args.workdir
  if workdir is None and args.seed == 0:
    workdir = os.path.join(RUNS if args.quick else RESULTS, f"srs_deq_{mode}")
    rundir = os.path.join(RESULTS, f"srs_deq_{mode}")
  elif workdir is None:
    workdir = rundir = os.path.join(RUNS, f"srs_deq_{mode}_seed{args.seed}")
  run(
    cfg,
    out,
    workdir,
    rundir,
    max_minutes=args.max_minutes,
    report_only=args.report,
    methods=args.methods,
    log=lambda s: print(time.strftime("%H:%M:%S"), s, flush=True),
  )


if __name__ == "__main__":
  main()
