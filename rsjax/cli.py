"""The ``rsjax`` command: train, certify, predict, analyze, verify, audit, convert, demo.

Global JAX configuration (compilation cache) is set here, in ``main`` only,
never at import of the library.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
import warnings
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
_count = _number(int, lambda v: v >= -1, ">= 0 or -1 (no limit)")
_nonneg_int = _number(int, lambda v: v >= 0, ">= 0")
_positive_float = _number(float, lambda v: v > 0 and np.isfinite(v), "> 0")
_probability = _number(float, lambda v: 0.0 < v < 1.0, "in (0, 1)")


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
    return training.load_model(model_dir)
  except (FileNotFoundError, ValueError) as e:
    if "tree structures do not match" not in str(e):
      raise CliError(f"no usable trained model in {model_dir!r}: {e}") from None
  # orbax reports another architecture as a long tree dump: say which one it holds.
  config = training.read_config(model_dir)
  named = config.get("model")
  held = _architecture_held(model_dir, config)
  holds = f"holds a {held!r} model" if held else "holds another architecture"
  raise CliError(f"the checkpoint in {model_dir!r} {holds}, but its config.json says {named!r} "
                 f"(num_classes {config.get('num_classes')}, input_shape "
                 f"{config.get('input_shape')}); retrain or fix config.json")


def _warn_if_unfinished(model_dir: str, config: dict) -> None:
  """Warns when the model's training stopped before its last epoch."""
  from rsjax.checkpoint import Checkpoints
  from rsjax.training import workdir as wd
  epochs = (config.get("train") or {}).get("epochs")
  if not isinstance(epochs, int):
    return  # not trained by 'rsjax train' (converted)
  with Checkpoints(os.path.join(model_dir, wd.CHECKPOINT_DIR), max_to_keep=None) as ckpt:
    done = ckpt.latest_step()
  if done is not None and done < epochs:
    warnings.warn(f"the model in {model_dir} finished {done} of its {epochs} training epochs "
                  "(run the same 'rsjax train' command again to finish it)", stacklevel=2)


def _architecture_held(model_dir: str, config: dict) -> str | None:
  """The zoo architecture whose weights the checkpoint holds, if any."""
  from rsjax import models, training
  for name in models.MODELS:
    if name == config.get("model"):
      continue
    try:
      model = models.create_model(name, num_classes=int(config["num_classes"]),
                                  input_shape=tuple(config["input_shape"]), rngs=0)
      training.restore_model(model_dir, model)
    except Exception:  # noqa: BLE001 -- not this one
      continue
    return name
  return None


def compilation_cache_dir(flag: str | None, environ=os.environ) -> str | None:
  """The persistent compilation cache of the command: ``--compilation-cache``, else
  ``$RSJAX_COMPILATION_CACHE``, else ``$XDG_CACHE_HOME/rsjax/jax`` (``~/.cache/rsjax/jax``);
  ``off`` (or ``none``) turns it off. None: off, or left to ``$JAX_COMPILATION_CACHE_DIR``."""
  value = flag if flag is not None else environ.get("RSJAX_COMPILATION_CACHE")
  if value is not None and value.strip().lower() in ("off", "none", ""):
    return None
  if value:
    return value
  if environ.get("JAX_COMPILATION_CACHE_DIR"):
    return None  # JAX reads it itself
  base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "rsjax", "jax")


def _setup_jax(args) -> None:
  cache = compilation_cache_dir(getattr(args, "compilation_cache", None))
  if cache:
    import jax
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


# ----------------------------------------------------------------------------- train


def _objective(args):
  """The training objective from ``--objective``, ``--num-noise``, ``--objective-arg`` and
  ``--sphere-attack``."""
  from rsjax import training
  hyper = {}
  for item in args.objective_arg:
    name, sep, value = item.partition("=")
    if not sep:
      raise CliError(f"--objective-arg expects NAME=VALUE, got {item!r}")
    try:
      hyper[name.strip().replace("-", "_")] = int(value) if value.strip().isdigit() else float(value)
    except ValueError:
      raise CliError(f"--objective-arg {name}: expected a number, got {value!r}") from None
  if args.num_noise is not None:
    hyper["num_noise"] = args.num_noise
  if args.sphere_attack is not None:
    if args.objective != "gaussian":
      raise CliError("--sphere-attack works with --objective gaussian (Sun et al.'s strategy)")
    hyper["attack"] = training.SphereAttack(steps=args.attack_steps, step_size=args.attack_step,
                                            norm=args.attack_norm, start_epoch=args.sphere_attack)
  return training.make_objective(args.objective, **hyper)


def _train_config(args, **more):
  """The ``TrainConfig`` of the training flags (``more``: its other fields)."""
  from rsjax import training
  return training.TrainConfig(
      sigma=args.sigma, epochs=args.epochs, batch_size=args.batch, lr=args.lr,
      momentum=args.momentum, weight_decay=args.weight_decay, lr_step=args.lr_step_size,
      gamma=args.gamma, objective=_objective(args), **more)


def _print_trained(args, history, what: str, more) -> int:
  """Prints the last epoch of ``history`` (``more(last)``: its method's own numbers); returns 0."""
  if history:
    last = history[-1]
    print(f"trained {args.model} {what}: epoch {last['epoch']}, clean accuracy "
          f"{last['clean_acc']:.4f}, {more(last)}; saved in {args.out}")
  return 0


def _fill_training_defaults(args) -> None:
  """Sets the schedule flags not given to the dataset's defaults and prints the schedule."""
  from rsjax import training
  d = training.training_defaults(args.dataset)
  given = []
  for flag, attr, field in (("epochs", "epochs", "epochs"), ("batch", "batch", "batch_size"),
                            ("lr", "lr", "lr"), ("lr-step-size", "lr_step_size", "lr_step")):
    if getattr(args, attr) is None:
      setattr(args, attr, getattr(d, field))
    else:
      given.append(f"--{flag}")
  told = f"given: {' '.join(given)}; " if given else ""
  print(f"training schedule: epochs {args.epochs}, batch {args.batch}, lr {args.lr:g}, "
        f"lr-step-size {args.lr_step_size} ({told}defaults for {args.dataset}: {d.describe()}, "
        f"{d.source})")


# Library words -> command words, for the errors of the trainer the command shows.
_CLI_WORDS = (("resume=False", "--overwrite (start over)"),
              ("pass resume=True to continue, or use a new workdir",
               "run without --overwrite to continue, or use a new --out"),
              ("allow_unsound=True (CLI --allow-unsound)", "--allow-unsound"),
              ("workdir", "--out directory"))


def _cli_error(e: Exception) -> CliError:
  """``e`` as a command error, in the command's words."""
  text = str(e)
  for lib, cli_words in _CLI_WORDS:
    text = text.replace(lib, cli_words)
  return CliError(text)


def _start_over(out: str) -> None:
  """``train --overwrite``: removes an earlier training run in ``out`` (only an rsjax workdir)."""
  import shutil
  from rsjax.training import workdir as wd
  if not os.path.isdir(out):
    return
  marks = [n for n in (wd.CONFIG_FILE, wd.CHECKPOINT_DIR) if os.path.exists(os.path.join(out, n))]
  if not marks:
    return
  shutil.rmtree(out)
  print(f"starting over: removed the earlier training run in {out}")


def cmd_train(args) -> int:
  import jax
  from rsjax import models, training
  _fill_training_defaults(args)
  if args.overwrite:
    _start_over(args.out)
  ds_train = _load_dataset(args.dataset, "train", args.data_dir)
  ds_test = _load_dataset(args.dataset, "test", args.data_dir)
  x, y = ds_train.arrays()
  xt, yt = ds_test.arrays()
  try:
    model = models.create_model(args.model, num_classes=ds_train.num_classes,
                                input_shape=tuple(ds_train.input_shape), rngs=args.seed)
  except ValueError as e:
    raise CliError(str(e)) from None
  model_config = {"model": args.model, "num_classes": int(ds_train.num_classes),
                  "input_shape": list(ds_train.input_shape), "dataset": args.dataset}
  if args.method == "ddrs":
    return _train_ddrs(args, model, (x, y), (xt, yt), model_config)
  if args.method == "ucan" or args.generator is not None:
    return _train_ucan(args, model, (x, y), model_config)
  if args.allow_unsound:
    raise CliError("--allow-unsound works with --method ucan --generator input")
  try:
    config = _train_config(
        args, discard=None if args.discard is None else training.Discard(
            epoch=args.discard, threshold=args.discard_threshold),
        reweigh=None if args.reweigh is None else training.Reweigh(epoch=args.reweigh))
    _, history = training.train(
        jax.random.key(args.seed), model, (x, y), config, eval_data=(xt, yt), workdir=args.out,
        resume=True, model_config=model_config, progress=not args.quiet)
  except ValueError as e:
    raise _cli_error(e) from None
  return _print_trained(args, history, f"on {args.dataset} at sigma={args.sigma}",
                        lambda last: f"noisy accuracy {last['noisy_acc']:.4f}")


def _train_ddrs(args, model, train_xy, test_xy, model_config) -> int:
  import jax
  from rsjax.training import ddrs as ddrs_training
  if args.discard is not None or args.reweigh is not None:
    raise CliError("--method ddrs cannot be combined with --discard or --reweigh")
  try:
    tc = _train_config(args)
    cfg = ddrs_training.DDRSConfig(sigma0=args.sigma, sigma_steps=args.sigma_steps,
                                   sigma_lr=args.sigma_lr, sigma_draws=args.sigma_draws,
                                   parametrization=args.sigma_param,
                                   warmup_epochs=args.ddrs_warmup_epochs)
    _, history, mem = ddrs_training.train_ddrs(
        jax.random.key(args.seed), model, train_xy, ddrs_config=cfg, train_config=tc,
        eval_data=test_xy, workdir=args.out, resume=True, model_config=model_config,
        progress=not args.quiet)
  except ValueError as e:
    raise _cli_error(e) from None
  return _print_trained(args, history, f"with DDRS (sigma0={args.sigma})",
                        lambda last: f"training sigma {mem.mean():.4f} +- {mem.std():.4f}")


def _train_ucan(args, model, train_xy, model_config) -> int:
  """``train --generator``: fine-tune ``--init`` (or a fresh model) with UCAN noise."""
  import jax
  from rsjax.training import ucan
  if args.generator is None:
    raise CliError("--method ucan needs --generator pattern-l1|pattern-l2|pattern-linf|universal|"
                   "input")
  if args.allow_unsound and args.generator != "input":
    raise CliError("--allow-unsound works with --generator input only")
  if args.init is not None:
    model, _ = _load_model(args.init)
  try:
    config = ucan.UCANConfig(generator=args.generator, sigma=args.sigma, epochs=args.epochs,
                             batch_size=args.batch, lr=args.lr, draws=args.ucan_draws)
    _, noise, _ = ucan.train_ucan(jax.random.key(args.seed), model, train_xy, config,
                                  workdir=args.out, model_config=model_config,
                                  progress=not args.quiet, allow_unsound=args.allow_unsound)
  except ValueError as e:
    raise _cli_error(e) from None
  if args.generator not in ucan.SOUND_GENERATORS:
    print(f"trained {args.model} with UCAN's input-dependent generator (lambda={args.sigma}) in "
          f"{args.out}: NOT SOUND, its radii are no certificate (rsjax.training.ucan."
          "certify_input_dependent with allow_unsound=True computes them); the sound alternative "
          "is --generator universal")
    return 0
  print(f"trained {args.model} with UCAN {args.generator} noise (lambda={args.sigma}): sigma in "
        f"[{noise.sigma.min():.4f}, {noise.sigma.max():.4f}], mean |mu| "
        f"{abs(noise.mu).mean():.4f}, frozen in "
        f"{os.path.join(args.out, ucan.NOISE_FILE)}")
  return 0


# ----------------------------------------------------------------------------- certify


def _method_plan(args, key, model, apply_fn, params, ds):
  """The registry entry of ``--method`` built with its flags (``rsjax.methods``)."""
  from rsjax import Sampling, methods
  method = methods.METHODS[args.method]
  for other in methods.METHODS.values():
    for o in other.options:
      if o not in method.options and getattr(args, o.name) != o.default:
        users = [m.name for m in methods.METHODS.values() if o in m.options]
        raise CliError(f"--{o.name.replace('_', '-')} works with --method {' or '.join(users)}, "
                       f"not {args.method}")
  try:
    ctx = methods.Context(
        key=key, model=model, apply_fn=apply_fn, params=params, dataset=ds, sigma=args.sigma,
        sampling=_sampling(args),
        multiclass=args.multiclass, workdir=args.model_dir,
        load_split=lambda split: _load_dataset(ds.name, split, args.data_dir))
    return method.plan(ctx, **{o.name: getattr(args, o.name) for o in method.options})
  except ValueError as e:
    raise CliError(str(e)) from None


def _sampling(args):
  """The ``rsjax.Sampling`` of the certify flags."""
  from rsjax import Sampling
  return Sampling(n0=args.N0, n=args.N, alpha=args.alpha, batch_size=args.batch, noise=args.noise,
                  precision=args.precision)


def _certificate_header(args, ds, details=None) -> dict:
  """The run-wide part of the certificate record (``rsjax.record.header``)."""
  from rsjax import budgeted, methods, record
  method = methods.METHODS[args.method]
  options = {o.name: getattr(args, o.name) for o in method.options}
  grid = options.get("grid")
  return record.header(
      method=args.method, sampling=_sampling(args), sigma=args.sigma, seed=args.seed,
      model=args.run_record["model"], input_shape=ds.input_shape, num_classes=ds.num_classes,
      multiclass=args.multiclass, settings=options, dataset=ds.name,
      budget=None if grid is None else budgeted.Budget(grid=grid), details=details)


def _load_torch(path: str, arch: str | None, normalize: str | None, input_shape=None):
  """The model of a PyTorch checkpoint; prints the normalization it uses."""
  from rsjax import models
  try:
    norm = "auto" if normalize is None else models.parse_normalize(normalize)
    model, config = models.load_torch(path, arch, normalize=norm, input_shape=input_shape)
  except models.UnknownNormalizationError as e:
    raise CliError(str(models.UnknownNormalizationError(
        e.arch, how="pass --normalize none, a dataset name (mnist, cifar10, imagenet2012, ...) "
        "or MEAN/STD (e.g. 0.1307/0.3081)"))) from None
  except (FileNotFoundError, ImportError, ValueError) as e:
    raise CliError(str(e)) from None
  print(f"{os.path.basename(path)}: {config['torch_arch']}, input normalization "
        f"{config['normalization']}")
  return model, config


def _sampling_run(args):
  """What ``certify`` and ``predict`` share: the model (a workdir of 'rsjax train' or
  'rsjax convert', or a PyTorch checkpoint), its config, the dataset, the model's
  pure apply, the selected indices and the key. Fills in ``args.sigma`` (default:
  the training sigma)."""
  import jax
  from rsjax import models, runner
  if args.torch_checkpoint is not None:
    if args.model_dir is not None:
      raise CliError("give either MODEL_DIR or --torch-checkpoint, not both")
    if args.dataset is None:
      raise CliError("--dataset is required with --torch-checkpoint")
    dataset_name = args.dataset
    ds = _load_dataset(dataset_name, args.split, args.data_dir)
    model, config = _load_torch(args.torch_checkpoint, args.torch_arch, args.normalize,
                                ds.input_shape)
  else:
    if args.model_dir is None:
      raise CliError("give MODEL_DIR (from 'rsjax train' or 'rsjax convert') or "
                     "--torch-checkpoint F.pth")
    if args.normalize is not None:
      raise CliError("--normalize works with --torch-checkpoint (a model directory keeps its "
                     "normalization)")
    model, config = _load_model(args.model_dir)
    _warn_if_unfinished(args.model_dir, config)
    dataset_name = args.dataset or config.get("dataset")
    if dataset_name is None:
      raise CliError("--dataset is required (the model directory does not name one)")
    ds = _load_dataset(dataset_name, args.split, args.data_dir)
    want = config.get("input_shape")
    if want is not None and tuple(want) != tuple(ds.input_shape):
      shape = lambda s: "x".join(str(d) for d in s)  # noqa: E731
      raise CliError(f"model expects {shape(want)} inputs, {dataset_name} is "
                     f"{shape(ds.input_shape)} (the model was trained on "
                     f"{config.get('dataset', 'another dataset')})")
  if args.sigma is None:
    if "sigma" not in config:
      raise CliError("--sigma is required (the model does not record its training sigma)")
    args.sigma = float(config["sigma"])
    if not args.sigma > 0:
      raise CliError(f"the model in {args.model_dir or args.torch_checkpoint!r} was trained "
                     f"without noise (sigma {args.sigma:g}): pass the certification noise "
                     "level with --sigma")
  apply_fn, params = models.to_apply_fn(model)
  if args.denoiser is not None:  # denoised smoothing: classifier(denoiser(x + delta))
    from rsjax.denoise import cli as denoise_cli
    apply_fn, params, _ = denoise_cli.compose_denoiser(args.denoiser, apply_fn, params,
                                                       sigma=args.sigma)
  indices = runner.select_indices(len(ds), skip=args.skip, start=args.start, stop=args.max)
  if not len(indices):
    raise CliError(f"no input selected: {dataset_name} {args.split} has {len(ds)} inputs, "
                   f"--start {args.start} --max {args.max}")
  args.run_record = _run_record(args, config, dataset_name, params)
  return model, config, ds, apply_fn, params, indices, jax.random.key(args.seed)


# Flags that do not change the rows (how fast, where from, how loud).
_NOT_RUN_IDENTITY = frozenset({
    "func", "command", "model_dir", "torch_checkpoint", "outfile", "data_dir", "batch",
    "inputs_per_call", "quiet",
    "overwrite", "debug", "compilation_cache", "coordinator", "num_processes", "process_id",
    "run_record"})


def _other_method_options(method: str | None) -> dict:
  """``{name: default}`` of the options of the certify methods other than ``method``."""
  from rsjax import methods
  if method not in methods.METHODS:
    return {}
  own = {o.name for o in methods.METHODS[method].options}
  return {o.name: o.default for m in methods.METHODS.values() for o in m.options
          if o.name not in own}


def _upgrade_run_record(path: str, run: dict) -> None:
  """Drops other methods' options (at their defaults) from a run record written before
  records held only the method's own options, so that such a file resumes."""
  import json

  from rsjax import io
  saved = io.read_run_record(path) if os.path.exists(path) else None
  others = _other_method_options(run.get("method"))
  if not saved or not any(k in others for k in saved):
    return
  kept = {k: v for k, v in saved.items() if not (k in others and v == others[k])}
  if kept == json.loads(json.dumps(run)):
    io.write_run_record(path, run)


def _run_record(args, config: dict, dataset_name: str, params) -> dict:
  """The identity of a certify/predict run, kept with its result file.

  Every flag counts except those in ``_NOT_RUN_IDENTITY`` and the options of
  methods other than ``--method`` (they do not change the rows; a mismatch
  names only what differs), so a new flag is part of the identity unless it
  is listed there.
  """
  import rsjax
  from rsjax import runner
  others = _other_method_options(getattr(args, "method", None))
  run = {k: v for k, v in vars(args).items() if k not in _NOT_RUN_IDENTITY and k not in others}
  run.update(command=args.command, dataset=dataset_name, architecture=config.get("model"),
             model=runner.fingerprint(params), rsjax=rsjax.__version__)
  return run


def _with_counts(extra_cols, extra_fn):
  """Adds the estimation counts column (``--save-counts``; p_A for ``analyze --pa-cdf``)."""
  from rsjax import metrics

  def fn(cert, j):
    if getattr(cert, "counts", None) is None:
      raise CliError("--save-counts: this method's certificate has no counts")
    out = extra_fn(cert, j) if extra_fn is not None else {}
    return {**out, metrics.COUNTS_COLUMN: metrics.format_counts(cert.counts[j])}

  return (*extra_cols, metrics.COUNTS_COLUMN), fn


def cmd_certify(args) -> int:
  from rsjax import distributed
  try:
    pid, nproc = distributed.initialize(args.coordinator, args.num_processes, args.process_id)
  except ValueError as e:
    raise CliError(str(e)) from None
  from rsjax import methods, runner
  if args.N < args.N0:
    raise CliError(f"--N {args.N} is smaller than --N0 {args.N0}: N counts the estimation "
                   "samples that bound p_A, N0 the few that select the class (Cohen et al.: "
                   "N0 100, N 100000); swap them?")
  model, _, ds, apply_fn, params, indices, key = _sampling_run(args)
  plan = _method_plan(args, key, model, apply_fn, params, ds)
  args.run_record["certificate"] = _certificate_header(args, ds, plan.details)
  if plan.sequential and nproc > 1:
    raise CliError(f"--method {args.method} certifies inputs one after another in one process")
  columns, row = plan.columns, plan.row
  if args.save_counts:
    columns, row = _with_counts(columns, row)
  last = []

  def fn(x, ids):
    last[:] = [plan.certify_fn(x, ids)]
    return last[0]

  inputs_per_call = (args.inputs_per_call or plan.inputs_per_call
                     or max(1, min(16, args.batch * 4 // max(args.N, 1))))
  os.makedirs(os.path.dirname(os.path.abspath(args.outfile)), exist_ok=True)
  # Several processes (hosts): each certifies a strided share of the indices into
  # its own rows file; process 0 merges them. The noise of an input depends only
  # on the key and its index, so the merged file equals a single-process run.
  mine = distributed.split_indices(indices, process_index=pid, process_count=nproc)
  path = args.outfile if nproc == 1 else distributed.process_path(
      args.outfile, process_index=pid, process_count=nproc)
  _upgrade_run_record(path, args.run_record)
  t0 = time.perf_counter()
  wrote = runner.certify_dataset(fn, ds.get_batch, mine, path,
                                 inputs_per_call=inputs_per_call, extra_columns=columns,
                                 extra_fn=row, progress=not args.quiet,
                                 resume=not args.overwrite, run=args.run_record,
                                 restore=methods.restorer(plan, ds), record=True, n=args.N,
                                 record_extra=plan.record)
  if nproc > 1:
    distributed.barrier("rsjax-certify-rows-written")
    if pid == 0:
      from rsjax import io
      distributed.merge_rows(
          [distributed.process_path(args.outfile, process_index=p, process_count=nproc)
           for p in range(nproc)], args.outfile)
      io.write_run_record(args.outfile, args.run_record)
      from rsjax import record
      record.merge([distributed.process_path(args.outfile, process_index=p, process_count=nproc)
                    for p in range(nproc)], args.outfile)
  print(f"certified {wrote} new inputs in {time.perf_counter() - t0:.1f}s "
        f"({len(mine)} of {len(indices)} selected in process {pid} of {nproc}); "
        f"results in {args.outfile}")
  print(f"method: {plan.describe}; precision: {args.precision}")
  if last:
    print(f"guarantee: {last[0].guarantee}")
  return 0


def cmd_predict(args) -> int:
  import rsjax
  from rsjax import runner
  _, _, ds, apply_fn, params, indices, key = _sampling_run(args)

  def fn(x, ids):
    return rsjax.predict(key, apply_fn, params, x, sigma=args.sigma, num_classes=ds.num_classes,
                         n=args.N, alpha=args.alpha, batch_size=args.batch, ids=ids,
                         noise=args.noise, precision=args.precision)

  wrote = runner.predict_dataset(fn, ds.get_batch, indices, args.outfile,
                                 inputs_per_call=args.inputs_per_call or 8,
                                 progress=not args.quiet, resume=not args.overwrite,
                                 run=args.run_record)
  from rsjax import io, metrics
  res = io.read_predict(args.outfile)
  print(f"predicted {wrote} new inputs; {len(res)} inputs in {args.outfile}: accuracy "
        f"{np.mean(res.correct):.4f}, abstained {metrics.abstention_rate(res.predict):.4f} "
        f"(N={args.N}, alpha={args.alpha})")
  return 0


# ----------------------------------------------------------------------------- analyze


def _extra_summary(label: str, res) -> str:
  """One line on a result file's extra columns (method outputs such as sigma or alm)."""
  parts = []
  for name, values in res.extra.items():
    numeric = values.dtype != object and len(values) > 0
    if name == "sound" and numeric:
      bad = int(np.sum(values == 0))
      parts.append(f"sound=1 on all {len(values)} rows" if bad == 0 else
                   f"sound=0 (NOT a certificate) on {bad} of {len(values)} rows")
    elif numeric:
      parts.append(f"{name}: mean {np.mean(values):.4g} [{np.min(values):.4g}, "
                   f"{np.max(values):.4g}]")
    else:
      parts.append(f"{name}: {len(set(values))} distinct values")
  return f"{label} extra columns: " + "; ".join(parts)


def cmd_analyze(args) -> int:
  from rsjax import io, metrics, plots
  results = {}
  labels = args.labels or [os.path.basename(p) for p in args.files]
  if len(labels) != len(args.files):
    raise CliError(f"--labels gives {len(labels)} names for {len(args.files)} files")
  for label, path in zip(labels, args.files):
    if not os.path.exists(path):
      raise CliError(f"result file {path!r} does not exist")
    results[label] = io.read_certify(path)
    if args.radius_column:
      res = results[label]
      if args.radius_column not in res.extra:
        raise CliError(f"{path} has no column {args.radius_column!r} (has {sorted(res.extra)})")
      rad = np.where(res.predict >= 0, np.asarray(res.extra[args.radius_column], np.float64), 0.0)
      results[label] = dataclasses.replace(res, radius=rad)
    if not len(results[label]):
      raise CliError(f"{path!r} has a header but no rows (nothing certified yet)")
  envelope = len(results) > 1
  if envelope:
    _warn_if_inputs_differ(results)
  radii = np.asarray(args.radii, dtype=np.float64)
  print(metrics.format_table(results, radii, fmt=args.format, show_envelope=envelope))
  for label, res in results.items():
    if res.extra:
      print(_extra_summary(label, res))
  if args.plot:
    title = _plot_title([io.read_run_record(p) for p in args.files], results)
    out = plots.plot_certified_accuracy(args.plot, results, show_envelope=envelope, title=title)
    print(f"plot written to {out}")
  try:
    if args.pa_cdf:
      pa = {label: metrics.label_probability(res) for label, res in results.items()}
      print(f"p_A CDF written to {plots.plot_pa_cdf(args.pa_cdf, pa)}")
    if args.easy_hard:
      _print_easy_hard(results, args.easy_hard, radii)
  except ValueError as e:
    raise CliError(str(e)) from None
  return 0


def _warn_if_inputs_differ(results: dict) -> None:
  """Warns (stderr) when the files of an envelope certify different inputs."""
  sets = {label: set(res.idx.tolist()) for label, res in results.items()}
  common = set.intersection(*sets.values())
  if any(len(v) != len(common) for v in sets.values()):
    sizes = ", ".join(f"{label}: {len(v)}" for label, v in sets.items())
    print(f"rsjax analyze: warning: the envelope mixes files over different inputs ({sizes}; "
          f"{len(common)} in common); compare runs over the same inputs", file=sys.stderr)


def _plot_title(records: list, results: dict) -> str:
  """sigma, noise (norm), N, alpha and number of inputs, from the files' run records."""
  from rsjax import noise as noise_lib

  def values(key):
    vals = [r.get(key) for r in records if r is not None and r.get(key) is not None]
    return ", ".join(dict.fromkeys(f"{v:g}" if isinstance(v, float) else str(v) for v in vals))

  parts = []
  if values("sigma"):
    parts.append(f"sigma={values('sigma')}")
  noises = [r.get("noise") for r in records if r is not None and r.get("noise")]
  if noises:
    parts.append(", ".join(dict.fromkeys(
        f"{n} ({noise_lib.get_noise(n).norm})" for n in noises)))
  for key in ("N", "alpha"):
    if values(key):
      parts.append(f"{key}={values(key)}")
  counts = ", ".join(dict.fromkeys(str(len(r)) for r in results.values()))
  parts.append(f"{counts} inputs")
  return "certified accuracy: " + "; ".join(parts)


def _print_easy_hard(results, reference_path: str, radii) -> None:
  """Certified accuracy on easy / hard inputs (p_A >= / < 0.5 under the reference file's model)."""
  from rsjax import io, metrics
  if not os.path.exists(reference_path):
    raise CliError(f"reference file {reference_path!r} does not exist")
  ref = io.read_certify(reference_path)
  ref_pa = (ref.idx, metrics.label_probability(ref))
  print(f"\ncertified accuracy on easy / hard inputs (p_A >= / < 0.5 under {reference_path})")
  head = ["", "subset", "n", *[f"r={r:g}" for r in radii]]
  rows = []
  for label, res in results.items():
    split = metrics.easy_hard_accuracy(res, ref_pa, radii)
    for sub in ("easy", "hard"):
      rows.append([label, sub, str(split[f"num_{sub}"]), *[f"{v:.3f}" for v in split[sub]]])
  widths = [max(len(r[j]) for r in [head, *rows]) for j in range(len(head))]
  for r in [head, *rows]:
    print("  ".join(c.ljust(w) if j < 2 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))))


# ----------------------------------------------------------------------------- verify, audit


def cmd_verify(args) -> int:
  from rsjax import verify
  status = 0
  for path in args.files:
    try:
      report = verify.verify(path)
    except (verify.VerifyError, ValueError) as e:
      raise CliError(str(e)) from None
    for m in report.mismatches[:args.show]:
      print(f"{path}: {m}")
    if len(report.mismatches) > args.show:
      print(f"{path}: ... and {len(report.mismatches) - args.show} more")
    print(report.summary())
    status = status or (0 if report.ok else 1)
  return status


def cmd_audit(args) -> int:
  from rsjax import audit
  if args.model_dir is None and args.torch_checkpoint is None:
    raise CliError("give the run's model: --model-dir DIR (or --torch-checkpoint F.pth)")
  try:
    report = audit.audit(args.file, model_dir=args.model_dir, rows=args.rows, seed=args.seed,
                         false_alarm=args.false_alarm, data_dir=args.data_dir,
                         torch_checkpoint=args.torch_checkpoint)
  except (audit.AuditError, ValueError) as e:
    raise CliError(str(e)) from None
  if not args.quiet:
    for c in report.checks:
      print(c)
  print(report.summary())
  return 0 if report.ok else 1


# ----------------------------------------------------------------------------- convert


def cmd_convert(args) -> int:
  from rsjax import training
  model, config = _load_torch(args.checkpoint, args.arch, args.normalize)
  config["source"] = os.path.basename(args.checkpoint)
  if args.dataset is not None:
    config["dataset"] = args.dataset
  if args.sigma is not None:
    config["sigma"] = args.sigma
  try:
    training.save_model(args.out, model, config)
  except ValueError as e:
    raise CliError(str(e)) from None
  print(f"converted {config['torch_arch']} ({config['num_classes']} classes) from "
        f"{args.checkpoint}; saved in {args.out}")
  return 0


# ----------------------------------------------------------------------------- demo


def cmd_demo(args) -> int:
  from rsjax import demo
  try:
    demo.run(args.out, sigmas=tuple(args.sigmas), epochs=args.epochs, n=args.N,
             num_images=args.images, seed=args.seed, progress=not args.quiet,
             overwrite=args.overwrite)
  except ValueError as e:
    raise CliError(str(e)) from None
  return 0


# ----------------------------------------------------------------------------- parser


def _option_type(option):
  """The argparse ``type=`` of a method option."""
  if option.type in (int, float) and option.positive:
    return _positive_int if option.type is int else _positive_float
  if option.type in (int, float, str):
    return option.type

  def parse(text: str):
    try:
      return option.type(text)
    except ValueError as e:
      raise argparse.ArgumentTypeError(str(e)) from None

  return parse


def _method_flags(parser) -> None:
  """One ``--flag`` per option of the registered methods (a shared option once)."""
  from rsjax import methods
  options, users = {}, {}
  for method in methods.METHODS.values():
    for o in method.options:
      if options.setdefault(o.name, o) != o:
        raise AssertionError(f"methods declare option {o.name!r} differently")
      users.setdefault(o.name, []).append(method.name)
  for name, o in options.items():
    parser.add_argument("--" + name.replace("_", "-"), dest=name, default=o.default,
                        type=_option_type(o), choices=o.choices,
                        help=f"{o.help} (--method {', '.join(users[name])})")


class _Parser(argparse.ArgumentParser):
  """An argument parser whose usage errors are one line."""

  def error(self, message):
    self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


class _HelpFormatter(argparse.HelpFormatter):
  """Adds each flag's default to its help, unless the help already tells it."""

  def _get_help_string(self, action):
    text = action.help or ""
    if (not action.option_strings or "default" in text
        or any(action.default is v for v in (None, False, argparse.SUPPRESS))):
      return text
    return text + " (default: %(default)s)"


def build_parser() -> argparse.ArgumentParser:
  from rsjax import __version__, methods, models, noise, precision, training
  from rsjax.training import ucan
  fmt = _HelpFormatter
  p = _Parser(
      prog="rsjax", description="Randomized smoothing in JAX: train, certify, predict, analyze.",
      formatter_class=fmt)
  p.add_argument("--version", action="version", version=f"rsjax {__version__}")
  p.add_argument("--compilation-cache", default=None, metavar="DIR",
                 help="directory of JAX's persistent compilation cache, or 'off' (or "
                 "$RSJAX_COMPILATION_CACHE; default: $XDG_CACHE_HOME/rsjax/jax, i.e. "
                 "~/.cache/rsjax/jax)")
  p.add_argument("--debug", action="store_true",
                 help="show the full traceback of an error instead of one line")
  sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
  # --debug also after the command (SUPPRESS: unset there, the top-level default stays).
  common = argparse.ArgumentParser(add_help=False)
  common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                      help="show the full traceback of an error instead of one line")

  def normalize_flag(q):
    q.add_argument("--normalize", default=None, metavar="NORM",
                   help="input normalization of a PyTorch checkpoint: none, a dataset name "
                   "(mnist, cifar10, imagenet2012) or MEAN/STD (e.g. 0.1307/0.3081); default: "
                   "its normalization layer's values, or the architecture's as in Cohen et "
                   "al. (CIFAR, ImageNet ResNets); required where neither is known")

  def data_flags(q, dataset_required=False):
    q.add_argument("--dataset", required=dataset_required, default=None,
                   help="digits, mnist5k (embedded, offline), mnist, cifar10, imagenet2012 (TFDS)")
    q.add_argument("--data-dir", default=None, help="TFDS data_dir holding prepared datasets")

  t = sub.add_parser("train", parents=[common], formatter_class=fmt,
                     help="train a base classifier on noisy inputs (Gaussian, Consistency, "
                          "SmoothAdv, MACER; Sun et al.'s strategies)")
  data_flags(t, dataset_required=True)
  t.add_argument("--model", required=True, help=", ".join(models.MODELS))
  t.add_argument("--sigma", type=float, default=0.25, help="training noise std (0 = clean)")
  t.add_argument("--out", required=True, help="output directory (checkpoints, config)")
  def by_dataset(field):
    return "; default by dataset: " + ", ".join(
        f"{name} {getattr(d, field):g}" for name, d in training.TRAINING_DEFAULTS.items())

  t.add_argument("--epochs", type=_positive_int, default=None,
                 help="number of epochs" + by_dataset("epochs") + ", else 90")
  t.add_argument("--batch", type=_positive_int, default=None,
                 help="training batch size" + by_dataset("batch_size") + ", else 256")
  t.add_argument("--lr", type=_positive_float, default=None,
                 help="initial learning rate (SGD)" + by_dataset("lr") + ", else 0.1")
  t.add_argument("--lr-step-size", type=_positive_int, default=None,
                 help="epochs between learning-rate drops" + by_dataset("lr_step")
                 + ", else 30")
  t.add_argument("--gamma", type=_positive_float, default=0.1,
                 help="learning-rate factor at each drop")
  t.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
  t.add_argument("--weight-decay", type=float, default=1e-4, help="L2 weight decay")
  t.add_argument("--seed", type=int, default=0, help="seed of initialization, shuffling and noise")
  t.add_argument("--objective", default="gaussian", choices=list(training.OBJECTIVES),
                 help="training loss (rsjax.training.objectives; default gaussian, Cohen et al.)")
  t.add_argument("--num-noise", type=_positive_int, default=None,
                 help="noise draws per input m (default: the objective's: 1 gaussian, 2 consistency, "
                      "4 smoothadv, 16 macer)")
  t.add_argument("--objective-arg", action="append", default=[], metavar="NAME=VALUE",
                 help="objective hyperparameter, e.g. lbd=20 (consistency), epsilon=0.5 "
                      "(smoothadv), gamma=8 (macer); repeatable")
  t.add_argument("--discard", type=_nonneg_int, default=None, metavar="E",
                 help="Sun et al.: after E epochs drop inputs with p_A < --discard-threshold "
                      "(100 noisy copies), then resample with replacement")
  t.add_argument("--discard-threshold", type=float, default=0.4, help="p_t of --discard")
  t.add_argument("--reweigh", type=_nonneg_int, default=None, metavar="E",
                 help="Sun et al.: from E epochs on, every 10 epochs, sample inputs in proportion "
                      "to their approximate certified radius (16 noisy copies)")
  t.add_argument("--sphere-attack", type=_nonneg_int, default=None, metavar="E",
                 help="Sun et al.: from E epochs on, replace each noise draw by the adaptive attack "
                      "on its sphere (gaussian objective)")
  t.add_argument("--attack-steps", type=_positive_int, default=6, help="T of --sphere-attack")
  t.add_argument("--attack-step", type=_positive_float, default=0.25,
                 help="step eps of --sphere-attack (L2; for linf the paper's sqrt(d)*eps)")
  t.add_argument("--attack-norm", choices=["l2", "linf"], default="l2",
                 help="norm of the --sphere-attack steps (the sphere is always L2)")
  t.add_argument("--overwrite", "--restart", dest="overwrite", action="store_true",
                 help="start over: remove the checkpoints of an earlier run in OUT (by default a "
                 "run in OUT resumes from its last epoch, with the same settings)")
  t.add_argument("--method", default="gaussian", choices=["gaussian", "ddrs", "ucan"],
                 help="gaussian: Cohen et al.; ddrs: per-example optimized sigma (DDRS Alg. 2), "
                      "--sigma is sigma0; ucan: anisotropic noise of --generator")
  t.add_argument("--sigma-steps", type=int, default=1, help="DDRS: sigma ascent steps per batch")
  t.add_argument("--sigma-lr", type=float, default=1e-2, help="DDRS: sigma ascent step size")
  t.add_argument("--sigma-draws", type=_positive_int, default=4,
                 help="DDRS: noise draws per ascent step")
  t.add_argument("--sigma-param", default="sigma", choices=["sigma", "log"],
                 help="DDRS: ascend sigma (paper) or log sigma")
  t.add_argument("--ddrs-warmup-epochs", type=int, default=0,
                 help="first epochs at the fixed sigma0 (ddrs)")
  t.add_argument("--generator", default=None,
                 choices=list(ucan.GENERATORS),
                 help="UCAN anisotropic noise (--sigma is the base lambda; --lr 0.001 as UCAN); "
                      "the noise is frozen in OUT/ucan_noise.npz")
  t.add_argument("--init", default=None, help="UCAN: fine-tune the model of this workdir")
  t.add_argument("--ucan-draws", type=_positive_int, default=5, help="UCAN noise draws per step")
  t.add_argument("--allow-unsound", action="store_true",
                 help="UCAN: train the input-dependent generator (its radii are NOT a certificate)")
  t.add_argument("--quiet", action="store_true", help="no progress bars")
  t.set_defaults(func=cmd_train)

  def sampling_flags(q):
    q.add_argument("model_dir", nargs="?", default=None,
                   help="directory written by 'rsjax train' or 'rsjax convert'")
    q.add_argument("outfile", help="result file (tab-separated, Cohen et al.'s format)")
    data_flags(q)
    q.add_argument("--split", default="test", help="dataset split")
    q.add_argument("--sigma", type=_positive_float, default=None,
                   help="noise level (default: the training sigma)")
    q.add_argument("--N", type=_positive_int, default=100_000, help="estimation samples")
    q.add_argument("--alpha", type=_probability, default=0.001, help="failure probability")
    q.add_argument("--batch", type=_positive_int, default=1000, help="forward passes per step")
    q.add_argument("--skip", type=_positive_int, default=1,
                   help="use every skip-th input (Cohen et al.'s --skip)")
    q.add_argument("--max", type=_count, default=-1,
                   help="stop at dataset index max, exclusive, as Cohen et al.'s --max (-1: no limit)")
    q.add_argument("--start", type=_nonneg_int, default=0, help="first dataset index")
    q.add_argument("--seed", type=int, default=0, help="PRNG seed of the noise")
    q.add_argument("--noise", default="gaussian", choices=list(noise.NOISES),
                   help="noise family (sets the norm of the radius)")
    q.add_argument("--precision", default=precision.DEFAULT, choices=list(precision.PRECISIONS),
                   help="how the classifier is computed: float32 with full-precision matmuls "
                   "(also on GPUs, whose JAX default is TF32), tf32, or bfloat16; part of the "
                   "run's identity (a resume at another precision is refused)")
    q.add_argument("--inputs-per-call", type=_positive_int, default=None,
                   help="inputs certified per engine call (rows are written after each call)")
    q.add_argument("--overwrite", "--restart", dest="overwrite", action="store_true",
                   help="start outfile over instead of resuming it (resuming needs the same run: "
                   "model, data, sigma, N, ...)")
    q.add_argument("--quiet", action="store_true", help="no progress bar")
    q.add_argument("--torch-checkpoint", default=None, metavar="F.pth",
                   help="certify a PyTorch checkpoint (Cohen et al.'s format, torchvision "
                   "ResNet, LeNet) instead of MODEL_DIR; needs rsjax[torch]")
    q.add_argument("--denoiser", default=None, metavar="DIR",
                   help="certify classifier(denoiser(x + noise)): a denoiser directory of "
                   "'rsjax train-denoiser' or a diffusers UNet2DModel directory (one-step "
                   "diffusion denoising at --sigma)")
    q.add_argument("--torch-arch", default=None,
                   help="architecture of --torch-checkpoint (default: its 'arch' entry or "
                   "recognized from its keys)")
    normalize_flag(q)

  c = sub.add_parser("certify", parents=[common], formatter_class=fmt,
                     help="certify a dataset (CERTIFY of Cohen et al.)")
  sampling_flags(c)
  c.add_argument("--N0", type=_positive_int, default=100, help="selection samples")
  c.add_argument("--multiclass", action="store_true",
                 help="multiclass radius with simultaneous bounds (Gaussian only)")
  c.add_argument("--method", default="cohen", choices=list(methods.METHODS),
                 help="certification method: " + "; ".join(
                     f"{m.name}: {m.summary}" for m in methods.METHODS.values()))
  _method_flags(c)
  c.add_argument("--save-counts", action="store_true",
                 help="add a 'counts' column (the N estimation counts per class) for "
                      "'analyze --pa-cdf / --easy-hard'")
  c.add_argument("--coordinator", default=None,
                 help="host:port of process 0 for a multi-process run (jax.distributed); "
                 "or $RSJAX_COORDINATOR_ADDRESS")
  c.add_argument("--num-processes", type=_positive_int, default=None,
                 help="number of processes (or $RSJAX_NUM_PROCESSES)")
  c.add_argument("--process-id", type=int, default=None,
                 help="this process' id (or $RSJAX_PROCESS_ID)")
  c.set_defaults(func=cmd_certify)

  pr = sub.add_parser("predict", parents=[common], formatter_class=fmt,
                     help="predict with abstention (PREDICT of Cohen et al.)")
  sampling_flags(pr)
  pr.set_defaults(func=cmd_predict)

  a = sub.add_parser("analyze", parents=[common], formatter_class=fmt,
                     help="tables and plots from certify result files")
  a.add_argument("files", nargs="+", help="certify result files")
  a.add_argument("--labels", nargs="+", default=None,
                 help="one name per file for the table and the plot (default: file names)")
  a.add_argument("--radii", nargs="+", type=float, default=[0.0, 0.25, 0.5, 0.75, 1.0],
                 help="radii of the table's columns")
  a.add_argument("--format", default="text", choices=["text", "markdown"], help="table format")
  a.add_argument("--radius-column", default=None,
                 help="read radii from this extra column (e.g. 'alm' of --method ucan; ALM is "
                      "not a ball guarantee)")
  a.add_argument("--plot", default=None, help="write the certified-accuracy curves here (PNG)")
  a.add_argument("--pa-cdf", default=None, metavar="PNG",
                 help="plot the empirical CDF of p_A per file (Sun et al. Fig. 3; needs files "
                      "certified with --save-counts)")
  a.add_argument("--easy-hard", default=None, metavar="REFERENCE",
                 help="certified accuracy on easy / hard inputs, split by p_A >= 0.5 in this "
                      "reference result file (e.g. the Gaussian model's, with --save-counts)")
  a.set_defaults(func=cmd_analyze)

  v = sub.add_parser("verify", parents=[common], formatter_class=fmt,
                     help="recompute every radius and prediction of certify runs from their "
                     "recorded counts (SciPy only: no model, no device); exit status 1 if a row "
                     "does not match")
  v.add_argument("files", nargs="+", help="certify result files (with their .run.json and "
                 ".cert.jsonl)")
  v.add_argument("--show", type=_nonneg_int, default=20, help="rows that do not match to print")
  v.set_defaults(func=cmd_verify)

  au = sub.add_parser("audit", parents=[common], formatter_class=fmt,
                      help="with the model, draw the counts of random rows of a certify run again "
                      "and test its noise; exit status 1 if the run fails")
  au.add_argument("file", help="certify result file (with its .run.json and .cert.jsonl)")
  au.add_argument("--model-dir", default=None, help="the model directory the run certified")
  au.add_argument("--torch-checkpoint", default=None, metavar="F.pth",
                  help="the PyTorch checkpoint the run certified, instead of --model-dir")
  au.add_argument("--data-dir", default=None, help="TFDS data_dir of the run's dataset")
  au.add_argument("--rows", type=_positive_int, default=20, help="rows drawn again")
  au.add_argument("--seed", type=int, default=0, help="seed of the choice of rows")
  au.add_argument("--false-alarm", type=_probability, default=0.001,
                  help="probability that an honest noise stream fails the noise tests")
  au.add_argument("--quiet", action="store_true", help="print the summary line only")
  au.set_defaults(func=cmd_audit)

  cv = sub.add_parser("convert", parents=[common], formatter_class=fmt,
                      help="convert a PyTorch checkpoint into a model directory "
                      "(certify it later without PyTorch)")
  cv.add_argument("checkpoint", help="PyTorch checkpoint (.pth, .pth.tar)")
  cv.add_argument("out", help="output model directory (as written by 'rsjax train')")
  cv.add_argument("--arch", default=None,
                  help="architecture (default: the checkpoint's 'arch' entry or recognized from "
                  "its keys): cifar_resnet20, cifar_resnet110, resnet18, resnet50, lenet, ...")
  normalize_flag(cv)
  cv.add_argument("--dataset", default=None,
                  help="record the dataset (the default dataset of certify)")
  cv.add_argument("--sigma", type=_positive_float, default=None,
                  help="record the training sigma (the default sigma of certify)")
  cv.set_defaults(func=cmd_convert)

  from rsjax.denoise import cli as denoise_cli
  denoise_cli.add_parser(sub, parents=[common], formatter_class=fmt,
                         number_types=(_positive_int, _positive_float))

  d = sub.add_parser("demo", parents=[common], formatter_class=fmt,
                     help="train and certify LeNet on the embedded MNIST (minutes, CPU)")
  d.add_argument("--out", default="runs/demo", help="output directory")
  d.add_argument("--sigmas", nargs="+", type=_positive_float, default=[0.25, 0.5],
                 help="noise levels, one model each")
  d.add_argument("--epochs", type=_positive_int, default=None,
                 help="training epochs (default: the demo's setting)")
  d.add_argument("--N", type=_positive_int, default=None,
                 help="estimation samples (default: the demo's setting)")
  d.add_argument("--images", type=_positive_int, default=None,
                 help="test images certified (default: the demo's setting)")
  d.add_argument("--seed", type=int, default=0, help="PRNG seed")
  d.add_argument("--overwrite", action="store_true",
                 help="start over the models and rows in OUT made with other settings (by "
                 "default the demo reuses only what was made with the same settings and stops "
                 "on the rest)")
  d.add_argument("--quiet", action="store_true", help="no progress bars")
  d.set_defaults(func=cmd_demo)
  return p


def _one_line(e: BaseException) -> str:
  """The message of an error as one line (an OSError names its file)."""
  if isinstance(e, OSError) and e.strerror:
    text = f"{e.strerror}: {e.filename!r}" if e.filename else e.strerror
  else:
    text = str(e) or type(e).__name__
    if not isinstance(e, (CliError, ValueError, FloatingPointError, RuntimeError)):
      text = f"{type(e).__name__}: {text}"
  return " ".join(text.split())


def main(argv: Sequence[str] | None = None) -> int:
  """Runs the command; every error ends as one line on stderr and a non-zero status.

  ``--debug`` re-raises instead, showing the traceback.
  """
  argv = list(sys.argv[1:] if argv is None else argv)
  if argv[:1] == ["--version"]:  # without importing JAX (seconds)
    from importlib import metadata
    try:
      version = metadata.version("rsjax")
    except metadata.PackageNotFoundError:
      from rsjax import __version__ as version
    print(f"rsjax {version}")
    raise SystemExit(0)  # as argparse's version action
  # Building the parser imports JAX, Flax and SciPy (2-5 s): say so on a terminal.
  loading = sys.stderr.isatty() and not {"-h", "--help", "--quiet"} & set(argv)
  if loading:
    print("rsjax: loading JAX ...", end="\r", file=sys.stderr, flush=True)
  parser = build_parser()
  if loading:
    print(" " * 24, end="\r", file=sys.stderr, flush=True)
  args = parser.parse_args(argv)

  def show_warning(message, category, filename, lineno, file=None, line=None):
    del category, filename, lineno, file, line
    print(f"rsjax {args.command}: warning: {' '.join(str(message).split())}", file=sys.stderr)

  try:
    _setup_jax(args)
    with warnings.catch_warnings():
      if not args.debug:
        warnings.showwarning = show_warning
      return int(args.func(args) or 0)
  except KeyboardInterrupt:
    if args.debug:
      raise
    print(f"rsjax {args.command}: interrupted", file=sys.stderr)
    return 130
  except Exception as e:  # noqa: BLE001 -- one line for the user; --debug shows the traceback
    if args.debug:
      raise
    print(f"rsjax {args.command}: error: {_one_line(e)}", file=sys.stderr)
    return 2


if __name__ == "__main__":
  sys.exit(main())
