"""``rsjax train``: a base classifier trained on noisy inputs (Gaussian, Consistency,
SmoothAdv, MACER; Sun et al.'s strategies; DDRS; UCAN's anisotropic noise).

The shared flags become a ``rsjax.training.TrainJob``; ``--method`` names a registered
method with a training half (``Method.training``), whose trainer trains the job with its
own options, declared and parsed as ``certify``'s."""

from __future__ import annotations

import argparse
import os

from rsjax.app import launch
from rsjax.app.cli import _names, flags
from rsjax.app.cli._args import CliError

__all__ = ["HELP", "add_arguments", "run"]

HELP = (
  "train a base classifier on noisy inputs (Gaussian, Consistency, "
  "SmoothAdv, MACER; Sun et al.'s strategies)"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
  """The flags of ``rsjax train``, in groups: the model and data (``--method`` among them),
  the schedule, the objective and Sun et al.'s strategies (shared by every method), one
  group per method's options, then output and execution."""
  from rsjax import methods

  p.usage = "%(prog)s --dataset DATASET --model MODEL --out OUT [flags]"
  core = p.add_argument_group("the model and data")
  core.add_argument("--model", required=True, help=", ".join(_names.MODELS))
  flags.data_flags(core, dataset_required=True)
  core.add_argument("--sigma", type=float, default=0.25, help="training noise std (0 = clean)")
  trainable = [m for m in methods.available() if m.training is not None]
  core.add_argument(
    "--method",
    default="cohen",
    choices=[m.name for m in trainable],
    help="how to train: " + "; ".join(f"{m.name}: {m.training.summary}" for m in trainable),
  )
  core.add_argument(
    "--seed", type=int, default=0, help="seed of initialization, shuffling and noise"
  )
  _schedule_flags(p.add_argument_group("schedule and optimizer"))
  _objective_flags(p.add_argument_group("objective"))
  _strategy_flags(p.add_argument_group("Sun et al.'s strategies"))
  flags.method_flags(p, flags.training_options)
  out = p.add_argument_group("output and execution")
  out.add_argument("--out", required=True, help="output directory (checkpoints, config)")
  out.add_argument(
    "--overwrite",
    "--restart",
    dest="overwrite",
    action="store_true",
    help="start over: remove the checkpoints of an earlier run in OUT (by default a "
    "run in OUT resumes from its last epoch, with the same settings)",
  )
  out.add_argument("--quiet", action="store_true", help="no progress bars")


def _schedule_flags(p) -> None:
  """The schedule and optimizer flags (defaults by dataset: ``rsjax.training``)."""
  flags.positive_flag(p, "--epochs", "number of epochs" + _by_dataset("epochs") + ", else 90")
  flags.positive_flag(
    p, "--batch", "training batch size" + _by_dataset("batch_size") + ", else 256"
  )
  flags.positive_flag(
    p, "--lr", "initial learning rate (SGD)" + _by_dataset("lr") + ", else 0.1", real=True
  )
  flags.positive_flag(
    p, "--lr-step-size", "epochs between learning-rate drops" + _by_dataset("lr_step") + ", else 30"
  )
  flags.positive_flag(p, "--gamma", "learning-rate factor at each drop", default=0.1, real=True)
  p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
  p.add_argument("--weight-decay", type=float, default=1e-4, help="L2 weight decay")


def _objective_flags(p) -> None:
  """The training loss and its hyperparameters."""
  p.add_argument(
    "--objective",
    default="gaussian",
    choices=list(_names.OBJECTIVES),
    help="training loss (rsjax.training.objectives; default gaussian, Cohen et al.)",
  )
  flags.positive_flag(
    p,
    "--num-noise",
    "noise draws per input m (default: the objective's: 1 gaussian, "
    "2 consistency, 4 smoothadv, 16 macer)",
  )
  p.add_argument(
    "--objective-arg",
    action="append",
    default=[],
    metavar="NAME=VALUE",
    help="objective hyperparameter, e.g. lbd=20 (consistency), epsilon=0.5 "
    "(smoothadv), gamma=8 (macer); repeatable",
  )


def _strategy_flags(p) -> None:
  """Sun et al.'s data strategies and adaptive attack."""
  p.add_argument(
    "--discard",
    type=flags.nonneg_int,
    default=None,
    metavar="E",
    help="Sun et al.: after E epochs drop inputs with p_A < --discard-threshold "
    "(100 noisy copies), then resample with replacement",
  )
  p.add_argument("--discard-threshold", type=float, default=0.4, help="p_t of --discard")
  p.add_argument(
    "--reweigh",
    type=flags.nonneg_int,
    default=None,
    metavar="E",
    help="Sun et al.: from E epochs on, every 10 epochs, sample inputs in proportion "
    "to their approximate certified radius (16 noisy copies)",
  )
  p.add_argument(
    "--sphere-attack",
    type=flags.nonneg_int,
    default=None,
    metavar="E",
    help="Sun et al.: from E epochs on, replace each noise draw by the adaptive attack "
    "on its sphere (gaussian objective)",
  )
  flags.positive_flag(p, "--attack-steps", "T of --sphere-attack", default=6)
  flags.positive_flag(
    p,
    "--attack-step",
    "step eps of --sphere-attack (L2; for linf the paper's sqrt(d)*eps)",
    default=0.25,
    real=True,
  )
  p.add_argument(
    "--attack-norm",
    choices=["l2", "linf"],
    default="l2",
    help="norm of the --sphere-attack steps (the sphere is always L2)",
  )


def _by_dataset(field: str) -> str:
  """The end of a schedule flag's help: its value per dataset (``rsjax.training``'s, as
  ``_names`` lists them)."""
  return "; default by dataset: " + ", ".join(
    f"{name} {d[field]:g}" for name, d in _names.TRAINING_DEFAULTS.items()
  )


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
      hyper[name.strip().replace("-", "_")] = (
        int(value) if value.strip().isdigit() else float(value)
      )
    except ValueError:
      raise CliError(f"--objective-arg {name}: expected a number, got {value!r}") from None
  if args.num_noise is not None:
    hyper["num_noise"] = args.num_noise
  if args.sphere_attack is not None:
    if args.objective != "gaussian":
      raise CliError("--sphere-attack works with --objective gaussian (Sun et al.'s strategy)")
    hyper["attack"] = training.SphereAttack(
      steps=args.attack_steps,
      step_size=args.attack_step,
      norm=args.attack_norm,
      start_epoch=args.sphere_attack,
    )
  return training.make_objective(args.objective, **hyper)


def _train_config(args):
  """The ``TrainConfig`` of the shared flags (schedule, optimizer, objective, strategies)."""
  from rsjax import training

  return training.TrainConfig(
    sigma=args.sigma,
    epochs=args.epochs,
    batch_size=args.batch,
    lr=args.lr,
    momentum=args.momentum,
    weight_decay=args.weight_decay,
    lr_step=args.lr_step_size,
    gamma=args.gamma,
    objective=_objective(args),
    discard=None
    if args.discard is None
    else training.Discard(epoch=args.discard, threshold=args.discard_threshold),
    reweigh=None if args.reweigh is None else training.Reweigh(epoch=args.reweigh),
  )


def _fill_training_defaults(args) -> None:
  """Sets the schedule flags not given to the dataset's defaults and prints the schedule."""
  from rsjax import training

  d = training.training_defaults(args.dataset)
  given = []
  for flag, attr, field in (
    ("epochs", "epochs", "epochs"),
    ("batch", "batch", "batch_size"),
    ("lr", "lr", "lr"),
    ("lr-step-size", "lr_step_size", "lr_step"),
  ):
    if getattr(args, attr) is None:
      setattr(args, attr, getattr(d, field))
    else:
      given.append(f"--{flag}")
  told = f"given: {' '.join(given)}; " if given else ""
  print(
    f"training schedule: epochs {args.epochs}, batch {args.batch}, lr {args.lr:g}, "
    f"lr-step-size {args.lr_step_size} ({told}defaults for {args.dataset}: {d.describe()}, "
    f"{d.source})"
  )


# Library words -> command words, for the errors of the trainer the command shows.
_CLI_WORDS = (
  ("resume=False", "--overwrite (start over)"),
  (
    "pass resume=True to continue, or use a new workdir",
    "run without --overwrite to continue, or use a new --out",
  ),
  ("allow_unsound=True (CLI --allow-unsound)", "--allow-unsound"),
  ("workdir", "--out directory"),
)


def _cli_error(e: Exception) -> CliError:
  """``e`` as a command error, in the command's words."""
  text = str(e)
  for lib, cli_words in _CLI_WORDS:
    text = text.replace(lib, cli_words)
  return CliError(text)


def _start_over(out: str) -> None:
  """``train --overwrite``: removes an earlier training run in ``out`` (only an rsjax workdir)."""
  import shutil

  from rsjax import models

  if not os.path.isdir(out):
    return
  marks = [
    n for n in (models.CONFIG_FILE, models.CHECKPOINT_DIR) if os.path.exists(os.path.join(out, n))
  ]
  if not marks:
    return
  shutil.rmtree(out)
  print(f"starting over: removed the earlier training run in {out}")


def run(args: argparse.Namespace) -> int:
  """Runs ``rsjax train``: the shared flags as a ``rsjax.training.TrainJob``, trained by the
  method's trainer (``Method.training``) with its options; returns the exit status."""
  import jax

  from rsjax import methods, models
  from rsjax.training.job import TrainJob

  method = methods.get(args.method)
  flags.refuse_other_options(args, method, flags.training_options)
  options = {o.name: getattr(args, o.name) for o in flags.training_options(method)}
  _fill_training_defaults(args)
  if args.overwrite:
    _start_over(args.out)
  ds_train = launch.open_dataset(args.dataset, "train", args.data_dir)
  ds_test = launch.open_dataset(args.dataset, "test", args.data_dir)
  try:
    model = models.create_model(
      args.model,
      num_classes=ds_train.num_classes,
      input_shape=tuple(ds_train.input_shape),
      rngs=args.seed,
    )
    job = TrainJob(
      jax.random.key(args.seed),
      model,
      ds_train.arrays(),
      ds_test.arrays(),
      _train_config(args),
      args.out,
      {
        "model": args.model,
        "num_classes": int(ds_train.num_classes),
        "input_shape": list(ds_train.input_shape),
        "dataset": args.dataset,
      },
      progress=not args.quiet,
    )
    print(method.training.train(job, **options))
  except (ValueError, FileNotFoundError) as e:
    raise _cli_error(e) from None
  return 0
