"""The flags of a certify or predict run, declared once.

``rsjax certify`` and ``rsjax predict`` parse them and build the run's value
(``rsjax.records.spec.RunSpec``) from them once (:func:`run_from_flags`, a caller of
``rsjax.app.launch.prepare``).
The value types and the data and normalization flags serve the other commands
too.
"""

from __future__ import annotations

import argparse

import numpy as np

from rsjax.app.cli._args import CliError
from rsjax.claims import PACKS

__all__ = [
  "positive_int",
  "count",
  "nonneg_int",
  "positive_float",
  "positive_flag",
  "probability",
  "batch_size",
  "data_flags",
  "normalize_flag",
  "model_source_flags",
  "add_sampling_flags",
  "add_certify_flags",
  "certify_options",
  "training_options",
  "method_flags",
  "refuse_other_options",
  "run_from_flags",
  "batch_of",
]


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


positive_int = _number(int, lambda v: v >= 1, ">= 1")
count = _number(int, lambda v: v >= -1, ">= 0 or -1 (no limit)")
nonneg_int = _number(int, lambda v: v >= 0, ">= 0")
positive_float = _number(float, lambda v: v > 0 and np.isfinite(v), "> 0")
probability = _number(float, lambda v: 0.0 < v < 1.0, "in (0, 1)")


def positive_flag(
  q: argparse.ArgumentParser, name: str, help: str, *, default=None, real: bool = False
) -> None:
  """Declares the flag ``name``: a whole number >= 1 (:func:`positive_int`) or, with
  ``real``, a finite number > 0 (:func:`positive_float`); ``default`` when it is not
  given (None: the command picks its own).

  Args:
    q: the parser.
    name: the flag, e.g. ``"--epochs"``.
    help: its line for ``--help``.
    default: its value when not given.
    real: a float flag rather than an integer one.
  """
  q.add_argument(name, type=positive_float if real else positive_int, default=default, help=help)


def batch_size(text: str) -> int | str:
  """An argparse ``type=``: ``auto`` or a positive integer."""
  return "auto" if text == "auto" else positive_int(text)


def normalize_flag(q: argparse.ArgumentParser) -> None:
  """``--normalize``: the input normalization of a PyTorch checkpoint."""
  q.add_argument(
    "--normalize",
    default=None,
    metavar="NORM",
    help="input normalization of a PyTorch checkpoint: none, a dataset name "
    "(mnist, cifar10, imagenet2012) or MEAN/STD (e.g. 0.1307/0.3081); default: "
    "its normalization layer's values, or the architecture's as in Cohen et "
    "al. (CIFAR, ImageNet ResNets); required where neither is known",
  )


def cache_dir_flag(q: argparse.ArgumentParser, help: str) -> None:
  """``--cache-dir DIR`` after a command: the global ``--compilation-cache`` (the same
  ``dest``); left out, the global flag's value stands."""
  q.add_argument(
    "--cache-dir", dest="compilation_cache", default=argparse.SUPPRESS, metavar="DIR", help=help
  )


def data_flags(q: argparse.ArgumentParser, dataset_required: bool = False) -> None:
  """``--dataset`` and ``--data-dir``."""
  q.add_argument(
    "--dataset",
    required=dataset_required,
    default=None,
    help="digits, mnist5k (embedded, offline), mnist, cifar10, imagenet2012 (TFDS), or an "
    "array file F.npz (images x [N, H, W, C] uint8 or in [0, 1], labels y [N])",
  )
  q.add_argument("--data-dir", default=None, help="TFDS data_dir holding prepared datasets")


def add_sampling_flags(q: argparse.ArgumentParser) -> None:
  """The flags ``certify`` and ``predict`` share: model, data, noise, N, alpha, ..."""
  from rsjax.claims import NOISES, PRECISIONS  # JAX-free: --help imports no JAX

  q.add_argument(
    "model_dir",
    nargs="?",
    default=None,
    help="directory written by 'rsjax train' or 'rsjax convert'",
  )
  q.add_argument("outfile", help="result file (tab-separated, Cohen et al.'s format)")
  data_flags(q)
  q.add_argument("--split", default="test", help="dataset split")
  positive_flag(q, "--sigma", "noise level (default: the training sigma)", real=True)
  positive_flag(q, "--N", "estimation samples", default=100_000)
  q.add_argument("--alpha", type=probability, default=0.001, help="failure probability")
  q.add_argument(
    "--batch",
    type=batch_size,
    default=None,
    help="forward passes per step, or auto (the largest that fits in the device memory); "
    "default: auto with --denoiser, else the fastest of a short timed probe where the run "
    "is long enough to pay for it (on a CPU; cached with the compilation cache), else 1000",
  )
  positive_flag(q, "--skip", "use every skip-th input (Cohen et al.'s --skip)", default=1)
  q.add_argument(
    "--max",
    type=count,
    default=-1,
    help="stop at dataset index max, exclusive, as Cohen et al.'s --max (-1: no limit)",
  )
  q.add_argument("--start", type=nonneg_int, default=0, help="first dataset index")
  q.add_argument("--seed", type=int, default=0, help="PRNG seed of the noise")
  q.add_argument(
    "--noise",
    default="gaussian",
    choices=list(NOISES),
    help="noise family (sets the norm of the radius)",
  )
  q.add_argument(
    "--precision",
    default=PRECISIONS[0],
    choices=list(PRECISIONS),
    help="how the classifier is computed: float32 with full-precision matmuls "
    "(also on GPUs, whose JAX default is TF32), tf32, or bfloat16; part of the "
    "run's identity (a resume at another precision is refused)",
  )
  q.add_argument(
    "--pack",
    type=int,
    default=1,
    choices=list(PACKS),
    help="run the model's stage of fewer than 32 channels on G samples packed in the "
    "channel axis (rsjax.models.pack_narrow_stage; CIFAR ResNets); 1: off. The same "
    "function up to rounding, so part of the run's identity, as the precision",
  )
  positive_flag(
    q,
    "--inputs-per-call",
    "inputs certified per engine call (rows are written after each call; "
    "default: 16, fewer above N = 10,000, 1 at N = 100,000: "
    "rsjax.runs.runner.default_inputs_per_call)",
  )
  q.add_argument(
    "--overwrite",
    "--restart",
    dest="overwrite",
    action="store_true",
    help="start outfile over instead of resuming it (resuming needs the same run: "
    "model, data, sigma, N, ...)",
  )
  q.add_argument("--quiet", action="store_true", help="no progress bar")
  model_source_flags(q)


def model_source_flags(q: argparse.ArgumentParser) -> None:
  """What a run certifies besides MODEL_DIR: ``--torch-checkpoint`` (and its ``--torch-arch``,
  ``--normalize``), ``--denoiser``, ``--resize`` (``rsjax certify``, ``predict``, ``bench``)."""
  q.add_argument(
    "--torch-checkpoint",
    default=None,
    metavar="F.pth",
    help="certify a PyTorch checkpoint (Cohen et al.'s format, torchvision "
    "ResNet, LeNet) instead of MODEL_DIR; needs rsjax[torch]",
  )
  q.add_argument(
    "--denoiser",
    default=None,
    metavar="DIR",
    help="certify classifier(denoiser(x + noise)): a denoiser directory of "
    "'rsjax train-denoiser' or a diffusers UNet2DModel directory (one-step "
    "diffusion denoising at --sigma), or an OpenAI improved/guided-diffusion checkpoint "
    "directory (openai_flags.json)",
  )
  q.add_argument(
    "--resize",
    default=None,
    metavar="HxW",
    help="resize the (denoised) inputs to H x W, bicubic with antialiasing, before the "
    "classifier (e.g. 224x224 for a ViT-B/16 on CIFAR-10)",
  )
  q.add_argument(
    "--torch-arch",
    default=None,
    help="architecture of --torch-checkpoint (default: its 'arch' entry or "
    "recognized from its keys)",
  )
  normalize_flag(q)


def add_certify_flags(q: argparse.ArgumentParser) -> None:
  """The flags of ``certify``: the sampling flags, then N0, the method and its options."""
  from rsjax import methods

  add_sampling_flags(q)
  positive_flag(q, "--N0", "selection samples", default=100)
  q.add_argument(
    "--multiclass",
    action="store_true",
    help="multiclass radius with simultaneous bounds (Gaussian only)",
  )
  q.add_argument(
    "--method",
    default="cohen",
    choices=[m.name for m in methods.available()],
    help="certification method: "
    + "; ".join(f"{m.name}: {m.summary}" for m in methods.available()),
  )
  method_flags(q)
  q.add_argument(
    "--save-counts",
    action="store_true",
    help="add a 'counts' column (the N estimation counts per class) for "
    "'analyze --pa-cdf / --easy-hard'",
  )
  q.add_argument(
    "--coordinator",
    default=None,
    help="host:port of process 0 for a multi-process run (jax.distributed); "
    "or $RSJAX_COORDINATOR_ADDRESS. Without it a Cloud TPU pod slice, SLURM "
    "(srun), Open MPI (mpirun) or Kubernetes job is joined as JAX detects it",
  )
  positive_flag(
    q,
    "--num-processes",
    "number of processes (or $RSJAX_NUM_PROCESSES); 1 stays one process inside a detected job",
  )
  q.add_argument(
    "--process-id", type=int, default=None, help="this process' id (or $RSJAX_PROCESS_ID)"
  )


def _option_type(option):
  """The argparse ``type=`` of a method option."""
  if option.type in (int, float) and option.positive:
    return positive_int if option.type is int else positive_float
  if option.type in (int, float, str):
    return option.type

  def parse(text: str):
    try:
      return option.type(text)
    except ValueError as e:
      raise argparse.ArgumentTypeError(str(e)) from None

  return parse


def certify_options(method) -> tuple:
  """The options of ``method``'s certify half (``certify``'s flags)."""
  return method.options


def training_options(method) -> tuple:
  """The options of ``method``'s training half (``train``'s flags); none if it has none."""
  return method.training.options if method.training is not None else ()


def method_flags(parser, options_of=certify_options) -> None:
  """One ``--flag`` per option of the registered methods (a shared option once);
  ``options_of(method)`` picks the half (:func:`certify_options`, :func:`training_options`)."""
  from rsjax import methods

  options, users = {}, {}
  for method in methods.available():
    for o in options_of(method):
      if options.setdefault(o.name, o) != o:
        raise AssertionError(f"methods declare option {o.name!r} differently")
      users.setdefault(o.name, []).append(method.name)
  for name, o in options.items():
    flag, help_ = "--" + name.replace("_", "-"), f"{o.help} (--method {', '.join(users[name])})"
    if o.type is bool:
      parser.add_argument(flag, dest=name, action="store_true", default=o.default, help=help_)
      continue
    parser.add_argument(
      flag, dest=name, default=o.default, type=_option_type(o), choices=o.choices, help=help_
    )


def refuse_other_options(args, method, options_of=certify_options) -> None:
  """An option of another method given with ``--method`` is an error, not silently ignored."""
  from rsjax import methods

  for other in methods.available():
    for o in options_of(other):
      if o not in options_of(method) and getattr(args, o.name, o.default) != o.default:
        users = [m.name for m in methods.available() if o in options_of(m)]
        raise CliError(
          f"--{o.name.replace('_', '-')} works with --method {' or '.join(users)}, "
          f"not {method.name}"
        )


def run_from_flags(args: argparse.Namespace):
  """``(run, loaded)`` of ``rsjax certify`` / ``rsjax predict`` flags: ``rsjax.app.launch.prepare``
  of their values. ``--sigma`` defaults to the model's training sigma."""
  from rsjax import Sampling, methods
  from rsjax.app import launch

  if (args.torch_checkpoint is None) == (args.model_dir is None):
    raise CliError(
      "give MODEL_DIR (from 'rsjax train' or 'rsjax convert') or --torch-checkpoint F.pth "
      "(one of them)"
    )
  if args.model_dir is not None and args.normalize is not None:
    raise CliError("--normalize works with --torch-checkpoint (a model directory keeps its own)")
  command = getattr(args, "command", "certify")
  method = methods.get(getattr(args, "method", "cohen") if command == "certify" else "cohen")
  refuse_other_options(args, method)
  n0, precision = getattr(args, "N0", 100), args.precision
  sampling = Sampling(n0=n0, n=args.N, alpha=args.alpha, noise=args.noise, precision=precision)
  torch = args.torch_checkpoint
  return launch.prepare(
    launch.TorchCheckpoint(torch, args.torch_arch, args.normalize) if torch else args.model_dir,
    sampling=sampling,
    out=args.outfile,
    dataset=args.dataset,
    split=args.split,
    sigma=args.sigma,
    sigma_source="flag",
    method=method.name,
    options={o.name: getattr(args, o.name) for o in method.options} if command == "certify" else {},
    rows=launch.DataRange(args.start, args.max, args.skip),
    seed=args.seed,
    multiclass=bool(getattr(args, "multiclass", False)),
    pack=int(getattr(args, "pack", 1)),
    resize=getattr(args, "resize", None),
    denoiser=args.denoiser,
    data_dir=args.data_dir,
    command=command,
  )


def batch_of(args: argparse.Namespace) -> int | str | None:
  """The ``--batch`` of a certify or predict command: as given, else ``"auto"`` with a
  denoiser (its memory per sample is unknown: measured), else None (not told: a timed
  probe's where it pays, ``rsjax.app.launch.execute.batch_choice``)."""
  batch = getattr(args, "batch", None)
  if batch is None:
    return "auto" if getattr(args, "denoiser", None) else None
  return batch
