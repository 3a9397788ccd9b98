"""The ``rsjax`` command: train, certify, predict, analyze, demo.

Global JAX configuration (compilation cache) is set here, in ``main`` only,
never at import of the library.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

import numpy as np

__all__ = ["main", "build_parser"]


class CliError(Exception):
  """An error reported to the user as one line, exit status 2."""


# ----------------------------------------------------------------------------- helpers


def _number(convert, ok, requirement: str):
  """An argparse ``type=``: ``convert`` the text, then require ``ok(value)``."""
  kind = "an integer" if convert is int else "a number"

  def parse(text: str):
    try:
      v = convert(text)
    except ValueError:
      raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
    if not ok(v):
      raise argparse.ArgumentTypeError(f"must be {requirement}, got {text}")
    return v

  return parse


_positive_int = _number(int, lambda v: v >= 1, ">= 1")
_count = _number(int, lambda v: v >= -1, ">= 0 or -1 (all)")
_positive_float = _number(float, lambda v: v > 0 and np.isfinite(v), "> 0")
_probability = _number(float, lambda v: 0.0 < v < 1.0, "in (0, 1)")


def _grid(text: str) -> tuple[float, ...]:
  """An argparse ``type=`` for a radius grid ``0,0.25,0.5``: ascending radii >= 0."""
  try:
    radii = tuple(float(v) for v in text.split(","))
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected comma-separated radii, got {text!r}") from None
  if not all(np.isfinite(r) and r >= 0 for r in radii) or any(
      b <= a for a, b in zip(radii, radii[1:])):
    raise argparse.ArgumentTypeError(f"radii must be >= 0 and strictly increasing, got {text}")
  return radii


def _load_dataset(name: str, split: str, data_dir: str | None):
  from rsjax import data
  try:
    return data.load(name, split, data_dir=data_dir)
  except data.DatasetNotFoundError as e:
    raise CliError(str(e)) from None
  except ValueError as e:
    raise CliError(str(e)) from None


def _load_model(model_dir: str):
  from rsjax import training
  if not os.path.isdir(model_dir):
    raise CliError(f"model directory {model_dir!r} does not exist; train one with "
                   "'rsjax train --dataset mnist5k --model lenet --sigma 0.25 --out DIR'")
  try:
    return training.load_model(model_dir, create_fn=_create_model)
  except (FileNotFoundError, ValueError) as e:
    raise CliError(f"no usable trained model in {model_dir!r}: {e}") from None


def _setup_jax(args) -> None:
  import jax
  cache = getattr(args, "compilation_cache", None) or os.environ.get("RSJAX_COMPILATION_CACHE")
  if cache:
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


# ----------------------------------------------------------------------------- train


def _create_model(name, *, num_classes, input_shape, rngs, **kwargs):
  """Model constructor by name: the zoo of ``rsjax.models`` plus ``deq`` models."""
  if name == "deq":
    from rsjax import deq
    return deq.DEQClassifier(num_classes=num_classes, input_shape=tuple(input_shape), rngs=rngs,
                             **kwargs)
  from rsjax import models
  return models.create_model(name, num_classes=num_classes, input_shape=input_shape, rngs=rngs,
                             **kwargs)


def cmd_train(args) -> int:
  import jax
  from rsjax import training
  ds_train = _load_dataset(args.dataset, "train", args.data_dir)
  ds_test = _load_dataset(args.dataset, "test", args.data_dir)
  x, y = ds_train.arrays()
  xt, yt = ds_test.arrays()
  try:
    model = _create_model(args.model, num_classes=ds_train.num_classes,
                          input_shape=tuple(ds_train.input_shape), rngs=args.seed)
  except ValueError as e:
    raise CliError(str(e)) from None
  model_config = {"model": args.model, "num_classes": int(ds_train.num_classes),
                  "input_shape": list(ds_train.input_shape), "dataset": args.dataset}
  try:
    _, history = training.train(
        jax.random.key(args.seed), model, (x, y), sigma=args.sigma, epochs=args.epochs,
        batch_size=args.batch, lr=args.lr, momentum=args.momentum,
        weight_decay=args.weight_decay, lr_step=args.lr_step_size, gamma=args.gamma,
        eval_data=(xt, yt), workdir=args.out, resume=not args.restart,
        model_config=model_config, progress=not args.quiet)
  except ValueError as e:
    raise CliError(str(e)) from None
  if history:
    last = history[-1]
    print(f"trained {args.model} on {args.dataset} at sigma={args.sigma}: epoch {last['epoch']}, "
          f"clean accuracy {last['clean_acc']:.4f}, noisy accuracy {last['noisy_acc']:.4f}; "
          f"saved in {args.out}")
  return 0


# ----------------------------------------------------------------------------- certify


def _method_certify_fn(args, key, apply_fn, params, model, ds):
  """The per-chunk certify function and extra result columns for ``--method``."""
  import rsjax
  common = dict(num_classes=ds.num_classes, n0=args.N0, n=args.N, alpha=args.alpha,
                batch_size=args.batch)
  if args.grid is not None and (args.method != "cohen" or args.multiclass):
    raise CliError("--grid (budgeted CERTIFY) works with --method cohen and the binary radius only")
  if args.method == "cohen":
    sigma = args.sigma

    def fn(x, ids):
      return rsjax.certify(key, apply_fn, params, x, sigma=sigma, ids=ids, noise=args.noise,
                           multiclass=args.multiclass, budget=args.grid, **common)

    if args.grid is not None:
      return fn, ("samples",), lambda cert, j: {"samples": int(cert.num_samples[j])}
    return fn, (), None
  if args.method == "idrs":
    from rsjax import idrs
    name = ds.name
    xtr = None
    if args.idrs_rate > 0:
      xtr, _ = _load_dataset(name, "train", args.data_dir).arrays()
    try:
      design = idrs.make_design(xtr, sigma=args.sigma, rate=args.idrs_rate, k=args.idrs_k,
                                m=args.idrs_m, dataset=name)
    except ValueError as e:
      raise CliError(f"{e} (set --idrs-m)") from None

    def fn(x, ids):
      return idrs.certify(key, apply_fn, params, x, design=design, ids=ids, **common)

    return fn, ("sigma",), lambda cert, j: {"sigma": repr(float(cert.sigma[j]))}
  if args.method in ("deq-standard", "srs"):
    from rsjax import deq
    if not isinstance(model, deq.DEQClassifier):
      raise CliError(f"--method {args.method} needs a DEQ model (trained with --model deq)")
    method = "srs" if args.method == "srs" else "standard"

    steps = args.deq_steps if args.deq_steps is not None else (3 if method == "srs" else 30)

    def fn(x, ids):
      return deq.certify_deq(key, model, None, x, sigma=args.sigma, ids=ids, method=method,
                             steps=steps, solver=args.deq_solver,
                             warmup_steps=args.deq_warmup_steps, m=args.srs_m,
                             check_steps=args.srs_check_steps,
                             correction=args.srs_correction, **common)

    return fn, (), None
  raise CliError(f"unknown --method {args.method!r}")


def _sampling_run(args):
  """What ``certify`` and ``predict`` share: the trained model, its config, the
  dataset, the model's pure apply, the selected indices and the key. Fills in
  ``args.sigma`` (default: the training sigma)."""
  import jax
  from rsjax import models, runner
  model, config = _load_model(args.model_dir)
  dataset_name = args.dataset or config.get("dataset")
  if dataset_name is None:
    raise CliError("--dataset is required (the model directory does not name one)")
  ds = _load_dataset(dataset_name, args.split, args.data_dir)
  if args.sigma is None:
    args.sigma = float(config["sigma"])
  apply_fn, params = models.to_apply_fn(model)
  indices = runner.select_indices(len(ds), skip=args.skip, max_count=args.max, start=args.start)
  return model, config, ds, apply_fn, params, indices, jax.random.key(args.seed)


def cmd_certify(args) -> int:
  from rsjax import distributed
  try:
    pid, nproc = distributed.initialize(args.coordinator, args.num_processes, args.process_id)
  except ValueError as e:
    raise CliError(str(e)) from None
  from rsjax import runner
  model, _, ds, apply_fn, params, indices, key = _sampling_run(args)
  fn, extra_cols, extra_fn = _method_certify_fn(args, key, apply_fn, params, model, ds)
  # Budgeted inputs stop independently and share launches: certify 16 per call.
  inputs_per_call = args.inputs_per_call or (
      16 if args.grid is not None else max(1, min(16, args.batch * 4 // max(args.N, 1))))
  os.makedirs(os.path.dirname(os.path.abspath(args.outfile)), exist_ok=True)
  # Several processes (hosts): each certifies a strided share of the indices into
  # its own rows file; process 0 merges them. The noise of an input depends only
  # on the key and its index, so the merged file equals a single-process run.
  mine = distributed.split_indices(indices, process_index=pid, process_count=nproc)
  path = args.outfile if nproc == 1 else distributed.process_path(
      args.outfile, process_index=pid, process_count=nproc)
  t0 = time.perf_counter()
  wrote = runner.certify_dataset(fn, ds.get_batch, mine, path,
                                 inputs_per_call=inputs_per_call, extra_columns=extra_cols,
                                 extra_fn=extra_fn, progress=not args.quiet,
                                 resume=not args.restart)
  if nproc > 1:
    distributed.barrier("rsjax-certify-rows-written")
    if pid == 0:
      distributed.merge_rows(
          [distributed.process_path(args.outfile, process_index=p, process_count=nproc)
           for p in range(nproc)], args.outfile)
  print(f"certified {wrote} new inputs in {time.perf_counter() - t0:.1f}s "
        f"({len(mine)} of {len(indices)} selected in process {pid} of {nproc}); "
        f"results in {args.outfile}")
  return 0


def cmd_predict(args) -> int:
  import rsjax
  from rsjax import runner
  _, _, ds, apply_fn, params, indices, key = _sampling_run(args)

  def fn(x, ids):
    return rsjax.predict(key, apply_fn, params, x, sigma=args.sigma, num_classes=ds.num_classes,
                         n=args.N, alpha=args.alpha, batch_size=args.batch, ids=ids,
                         noise=args.noise)

  wrote = runner.predict_dataset(fn, ds.get_batch, indices, args.outfile,
                                 inputs_per_call=args.inputs_per_call or 8,
                                 progress=not args.quiet, resume=not args.restart)
  print(f"predicted {wrote} new inputs; results in {args.outfile}")
  return 0


# ----------------------------------------------------------------------------- analyze


def cmd_analyze(args) -> int:
  from rsjax import io, metrics, plots
  results = {}
  labels = args.labels or [os.path.basename(p) for p in args.files]
  if len(labels) != len(args.files):
    raise CliError(f"--labels gives {len(labels)} names for {len(args.files)} files")
  for label, path in zip(labels, args.files):
    if not os.path.exists(path):
      raise CliError(f"result file {path!r} does not exist")
    try:
      results[label] = io.read_certify(path)
    except ValueError as e:
      raise CliError(f"{path}: {e}") from None
  radii = np.asarray(args.radii, dtype=np.float64)
  print(metrics.format_table(results, radii, fmt=args.format, show_envelope=len(results) > 1))
  if args.plot:
    out = plots.plot_certified_accuracy(args.plot, results, show_envelope=len(results) > 1)
    print(f"plot written to {out}")
  return 0


# ----------------------------------------------------------------------------- demo


def cmd_demo(args) -> int:
  from rsjax import demo
  demo.run(args.out, sigmas=tuple(args.sigmas), epochs=args.epochs, n=args.N,
           num_images=args.images, seed=args.seed, progress=not args.quiet)
  return 0


# ----------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
      prog="rsjax", description="Randomized smoothing in JAX: train, certify, predict, analyze.")
  p.add_argument("--compilation-cache", default=None,
                 help="directory of JAX's persistent compilation cache")
  sub = p.add_subparsers(dest="command", required=True)

  def data_flags(q, dataset_required=False):
    q.add_argument("--dataset", required=dataset_required, default=None,
                   help="digits, mnist5k (embedded, offline), mnist, cifar10, imagenet2012 (TFDS)")
    q.add_argument("--data-dir", default=None, help="TFDS data_dir holding prepared datasets")

  t = sub.add_parser("train", help="train a base classifier with Gaussian noise (Cohen et al.)")
  data_flags(t, dataset_required=True)
  t.add_argument("--model", required=True,
                 help="mlp, cnn, lenet, resnet20, resnet110, resnet18, resnet50, deq")
  t.add_argument("--sigma", type=float, default=0.25, help="training noise std (0 = clean)")
  t.add_argument("--out", required=True, help="output directory (checkpoints, config)")
  t.add_argument("--epochs", type=_positive_int, default=90)
  t.add_argument("--batch", type=_positive_int, default=256)
  t.add_argument("--lr", type=_positive_float, default=0.1)
  t.add_argument("--lr-step-size", type=_positive_int, default=30)
  t.add_argument("--gamma", type=_positive_float, default=0.1)
  t.add_argument("--momentum", type=float, default=0.9)
  t.add_argument("--weight-decay", type=float, default=1e-4)
  t.add_argument("--seed", type=int, default=0)
  t.add_argument("--restart", action="store_true", help="do not resume: fail if OUT already holds checkpoints")
  t.add_argument("--quiet", action="store_true")
  t.set_defaults(func=cmd_train)

  def sampling_flags(q):
    q.add_argument("model_dir", help="directory written by 'rsjax train'")
    q.add_argument("outfile", help="result file (tab-separated, Cohen et al.'s format)")
    data_flags(q)
    q.add_argument("--split", default="test")
    q.add_argument("--sigma", type=_positive_float, default=None,
                   help="noise level (default: the training sigma)")
    q.add_argument("--N", type=_positive_int, default=100_000, help="estimation samples")
    q.add_argument("--alpha", type=_probability, default=0.001, help="failure probability")
    q.add_argument("--batch", type=_positive_int, default=1000, help="forward passes per step")
    q.add_argument("--skip", type=_positive_int, default=1, help="certify every skip-th input")
    q.add_argument("--max", type=_count, default=-1, help="at most this many inputs (-1: all)")
    q.add_argument("--start", type=int, default=0, help="first dataset index")
    q.add_argument("--seed", type=int, default=0, help="PRNG seed of the noise")
    q.add_argument("--noise", default="gaussian",
                   choices=["gaussian", "laplace", "uniform", "uniform_l1", "uniform_linf"])
    q.add_argument("--inputs-per-call", type=_positive_int, default=None,
                   help="inputs certified per engine call (rows are written after each call)")
    q.add_argument("--restart", action="store_true", help="overwrite outfile instead of resuming")
    q.add_argument("--quiet", action="store_true")

  c = sub.add_parser("certify", help="certify a dataset (CERTIFY of Cohen et al.)")
  sampling_flags(c)
  c.add_argument("--N0", type=_positive_int, default=100, help="selection samples")
  c.add_argument("--multiclass", action="store_true",
                 help="multiclass radius with simultaneous bounds (Gaussian only)")
  c.add_argument("--grid", type=_grid, default=None,
                 help="budgeted CERTIFY for this radius grid (e.g. 0,0.25,0.5,0.75): stop each "
                 "input once its certified grid radius is decided, at most --N samples; adds a "
                 "'samples' column")
  c.add_argument("--method", default="cohen", choices=["cohen", "idrs", "deq-standard", "srs"])
  c.add_argument("--idrs-rate", type=float, default=0.01, help="IDRS semi-elasticity r")
  c.add_argument("--idrs-k", type=_positive_int, default=20, help="IDRS nearest neighbours k")
  c.add_argument("--idrs-m", type=float, default=None,
                 help="IDRS offset m (default by dataset: 1.5 for MNIST, 5 for CIFAR-10)")
  c.add_argument("--deq-solver", default="anderson", choices=["anderson", "naive"],
                 help="DEQ fixed-point solver (naive = plain iteration)")
  c.add_argument("--deq-steps", type=_positive_int, default=None,
                 help="solver steps per sample (default: 30 for deq-standard, 3 for srs)")
  c.add_argument("--deq-warmup-steps", type=_positive_int, default=10,
                 help="SRS: steps on the first chunk of each chain")
  c.add_argument("--srs-m", type=_positive_int, default=400,
                 help="SRS: check samples re-solved from scratch")
  c.add_argument("--srs-check-steps", type=_positive_int, default=30,
                 help="SRS: solver steps of the check samples (the certified classifier)")
  c.add_argument("--srs-correction", default="paper", choices=["paper", "authors_code"])
  c.add_argument("--coordinator", default=None,
                 help="host:port of process 0 for a multi-process run (jax.distributed); "
                 "or $RSJAX_COORDINATOR_ADDRESS")
  c.add_argument("--num-processes", type=_positive_int, default=None,
                 help="number of processes (or $RSJAX_NUM_PROCESSES)")
  c.add_argument("--process-id", type=int, default=None,
                 help="this process' id (or $RSJAX_PROCESS_ID)")
  c.set_defaults(func=cmd_certify)

  pr = sub.add_parser("predict", help="predict with abstention (PREDICT of Cohen et al.)")
  sampling_flags(pr)
  pr.set_defaults(func=cmd_predict)

  a = sub.add_parser("analyze", help="tables and plots from certify result files")
  a.add_argument("files", nargs="+")
  a.add_argument("--labels", nargs="+", default=None)
  a.add_argument("--radii", nargs="+", type=float, default=[0.0, 0.25, 0.5, 0.75, 1.0])
  a.add_argument("--format", default="text", choices=["text", "markdown"])
  a.add_argument("--plot", default=None, help="write the certified-accuracy curves here (PNG)")
  a.set_defaults(func=cmd_analyze)

  d = sub.add_parser("demo", help="train and certify LeNet on the embedded MNIST (minutes, CPU)")
  d.add_argument("--out", default="runs/demo")
  d.add_argument("--sigmas", nargs="+", type=_positive_float, default=[0.25, 0.5])
  d.add_argument("--epochs", type=_positive_int, default=None)
  d.add_argument("--N", type=_positive_int, default=None)
  d.add_argument("--images", type=_positive_int, default=None)
  d.add_argument("--seed", type=int, default=0)
  d.add_argument("--quiet", action="store_true")
  d.set_defaults(func=cmd_demo)
  return p


def main(argv: Sequence[str] | None = None) -> int:
  parser = build_parser()
  args = parser.parse_args(argv)
  _setup_jax(args)
  try:
    return int(args.func(args) or 0)
  except CliError as e:
    print(f"rsjax {args.command}: error: {e}", file=sys.stderr)
    return 2


if __name__ == "__main__":
  sys.exit(main())
