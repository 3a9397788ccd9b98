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

from rsjax.app.cli._args import CliError, torch_module_flag
from rsjax.claims import ALPHA_MAX, PACKS

__all__ = [
  "positive_int",
  "count",
  "nonneg_int",
  "positive_float",
  "positive_flag",
  "probability",
  "alpha_level",
  "batch_size",
  "data_flags",
  "normalize_flag",
  "model_source_flags",
  "add_sampling_flags",
  "output_flags",
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
#: ``--alpha`` of a run: a probability no larger than ``rsjax.claims.ALPHA_MAX`` (a bound that
#: fails more often than it holds states nothing), refused before anything loads.
alpha_level = _number(float, lambda v: 0.0 < v <= ALPHA_MAX, f"in (0, {ALPHA_MAX:g}]")


def positive_flag(
  q: argparse._ActionsContainer, name: str, help: str, *, default=None, real: bool = False
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


def normalize_flag(q: argparse._ActionsContainer) -> None:
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


def cache_dir_flag(q: argparse._ActionsContainer, help: str) -> None:
  """``--cache-dir DIR`` after a command: the global ``--compilation-cache`` (the same
  ``dest``); left out, the global flag's value stands."""
  q.add_argument(
    "--cache-dir", dest="compilation_cache", default=argparse.SUPPRESS, metavar="DIR", help=help
  )


def data_flags(q: argparse._ActionsContainer, dataset_required: bool = False) -> None:
  """``--dataset`` and ``--data-dir``."""
  q.add_argument(
    "--dataset",
    required=dataset_required,
    default=None,
    help="digits, mnist5k (embedded, offline), mnist, cifar10, imagenet2012 (TFDS or a "
    "folder: --data-dir), an array file F.npz (images x [N, H, W, C] uint8 or in [0, 1], "
    "labels y [N]), or an image folder DIR (DIR/<class>/<image>)",
  )
  q.add_argument(
    "--data-dir",
    default=None,
    help="TFDS data_dir holding prepared datasets, or MNIST's IDX files (or MNIST/raw/ holding "
    "them), or torchvision's cifar-10-batches-py "
    "(or the folder holding it), or an ImageNet folder holding val/<wnid>/<image>",
  )


def add_sampling_flags(
  q: argparse.ArgumentParser, *, certify: bool = False
) -> dict[str, argparse._ArgumentGroup]:
  """The flags ``certify`` and ``predict`` share, in groups: the run (data, noise, the
  sample counts, the rows), the model, the computation, output and execution.

  Args:
    q: the parser.
    certify: add ``certify``'s own core flags in their places: ``--N0`` beside ``--N``,
      ``--multiclass`` and ``--method`` after ``--alpha``.

  Returns:
    ``{"run", "model", "computation", "output"}``: the groups, for the command's own flags.
  """
  from rsjax.claims import NOISES  # JAX-free: --help imports no JAX

  q.add_argument(
    "model_dir",
    nargs="?",
    default=None,
    help="directory written by 'rsjax train' or 'rsjax convert'",
  )
  q.add_argument("outfile", help="result file (tab-separated, Cohen et al.'s format)")
  groups = {
    "run": q.add_argument_group("the run", "the data, the noise, the samples and the rows"),
    "model": q.add_argument_group("the model", "what is certified besides MODEL_DIR"),
    "computation": q.add_argument_group(
      "computation", "how the classifier is computed and how fast"
    ),
  }
  run = groups["run"]
  data_flags(run)
  run.add_argument("--split", default="test", help="dataset split")
  positive_flag(run, "--sigma", "noise level (default: the training sigma)", real=True)
  run.add_argument(
    "--noise",
    default="gaussian",
    choices=list(NOISES),
    help="noise family (sets the norm of the radius)",
  )
  if certify:
    positive_flag(run, "--N0", "selection samples", default=100)
  positive_flag(run, "--N", "estimation samples", default=100_000)
  run.add_argument("--alpha", type=alpha_level, default=0.001, help="failure probability")
  if certify:
    _method_choice(run)
  run.add_argument("--seed", type=int, default=0, help="PRNG seed of the noise")
  run.add_argument("--start", type=nonneg_int, default=0, help="first dataset index")
  run.add_argument(
    "--max",
    type=count,
    default=-1,
    help="stop at dataset index max, exclusive, as Cohen et al.'s --max (-1: no limit)",
  )
  positive_flag(run, "--skip", "use every skip-th input (Cohen et al.'s --skip)", default=1)
  model_source_flags(groups["model"])
  _computation_flags(groups["computation"])
  # Last: the method groups come between (add_certify_flags), then output and execution.
  return groups


def output_flags(q: argparse.ArgumentParser) -> argparse._ArgumentGroup:
  """The group "output and execution" of ``certify`` and ``predict``: ``--overwrite``,
  ``--quiet``; the command adds its own."""
  out = q.add_argument_group("output and execution")
  out.add_argument(
    "--overwrite",
    "--restart",
    dest="overwrite",
    action="store_true",
    help="start outfile over instead of resuming it (resuming needs the same run: "
    "model, data, sigma, N, ...)",
  )
  out.add_argument("--quiet", action="store_true", help="no progress bar")
  return out


def _method_choice(q) -> None:
  """``--multiclass`` and ``--method`` (``certify``)."""
  from rsjax import methods

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


def _computation_flags(q) -> None:
  """``--precision``, ``--pack`` (both part of the run's identity), ``--batch`` and
  ``--inputs-per-call`` (speed only)."""
  from rsjax.claims import PRECISIONS  # JAX-free: --help imports no JAX

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
  q.add_argument(
    "--batch",
    type=batch_size,
    default=None,
    help="forward passes per step, or auto (the largest that fits in the device memory); "
    "default: auto with --denoiser, else the fastest of a short timed probe where the run "
    "is long enough to pay for it (on a CPU; cached with the compilation cache), else 1000",
  )
  positive_flag(
    q,
    "--inputs-per-call",
    "inputs certified per engine call (rows are written after each call; "
    "default: 16, fewer above N = 10,000, 1 at N = 100,000: "
    "rsjax.runs.runner.default_inputs_per_call)",
  )


def model_source_flags(q: argparse._ActionsContainer) -> None:
  """What a run certifies besides MODEL_DIR: ``--torch-checkpoint`` (and its ``--torch-arch``,
  ``--normalize``), ``--denoiser``, ``--resize`` (``rsjax certify``, ``predict``, ``bench``)."""
  q.add_argument(
    "--torch-checkpoint",
    default=None,
    metavar="F.pth",
    help="certify a PyTorch checkpoint (Cohen et al.'s format, torchvision ResNet, LeNet) "
    "instead of MODEL_DIR (or the state dict of --torch-module); needs rsjax[torch]",
  )
  torch_module_flag(q, "certify")
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


def add_certify_flags(q: argparse.ArgumentParser) -> argparse._ArgumentGroup:
  """The flags of ``certify``, in groups: the run (``--N0`` beside ``--N``, ``--method``),
  the model, the computation, one group per method's options, then output and execution
  (returned: ``certify`` adds ``--cache-dir`` to it)."""
  add_sampling_flags(q, certify=True)
  method_flags(q)
  out = output_flags(q)
  out.add_argument(
    "--save-counts",
    action="store_true",
    help="add a 'counts' column (the N estimation counts per class) for "
    "'analyze --pa-cdf / --easy-hard'",
  )
  out.add_argument(
    "--coordinator",
    default=None,
    help="host:port of process 0 for a multi-process run (jax.distributed); "
    "or $RSJAX_COORDINATOR_ADDRESS. Without it a Cloud TPU pod slice, SLURM "
    "(srun), Open MPI (mpirun) or Kubernetes job is joined as JAX detects it",
  )
  positive_flag(
    out,
    "--num-processes",
    "number of processes (or $RSJAX_NUM_PROCESSES); 1 stays one process inside a detected job",
  )
  out.add_argument(
    "--process-id", type=int, default=None, help="this process' id (or $RSJAX_PROCESS_ID)"
  )
  return out


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
  """One ``--flag`` per option of the registered methods (a shared option once), in one
  argument group per method (per set of methods, for a shared option), in the order of
  the registry; ``options_of(method)`` picks the half (:func:`certify_options`,
  :func:`training_options`)."""
  from rsjax import methods

  options, users = {}, {}
  for method in methods.available():
    for o in options_of(method):
      if options.setdefault(o.name, o) != o:
        raise AssertionError(f"methods declare option {o.name!r} differently")
      users.setdefault(o.name, []).append(method.name)
  groups: dict[tuple[str, ...], argparse._ArgumentGroup] = {}
  for name, o in options.items():
    who = tuple(users[name])
    if who not in groups:
      groups[who] = parser.add_argument_group(f"--method {', '.join(who)}")
    flag, help_ = "--" + name.replace("_", "-"), o.help  # the group names the method
    if o.type is bool:
      groups[who].add_argument(flag, dest=name, action="store_true", default=o.default, help=help_)
      continue
    groups[who].add_argument(
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

  module = getattr(args, "torch_module", None)
  if (args.torch_checkpoint is None and module is None) == (args.model_dir is None):
    raise CliError(
      "give MODEL_DIR (from 'rsjax train' or 'rsjax convert'), --torch-checkpoint F.pth or "
      "--torch-module SPEC (one of them)"
    )
  if args.model_dir is not None and args.normalize is not None:
    raise CliError("--normalize works with --torch-checkpoint (a model directory keeps its own)")
  command = getattr(args, "command", "certify")
  method = methods.get(getattr(args, "method", "cohen") if command == "certify" else "cohen")
  refuse_other_options(args, method)
  n0, precision = getattr(args, "N0", 100), args.precision
  sampling = Sampling(n0=n0, n=args.N, alpha=args.alpha, noise=args.noise, precision=precision)
  torch = args.torch_checkpoint or module
  what = launch.TorchCheckpoint(torch, args.torch_arch, args.normalize, module) if torch else None
  return launch.prepare(
    what or args.model_dir,
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
