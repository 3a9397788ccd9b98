"""``rsjax bench``: how many noisy samples per second a model certifies (``rsjax.certify``), in
which precision, how far from the device's limit; its figures as a table, JSON and a plot."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING

from rsjax.app.cli import flags
from rsjax.app.cli._args import CliError
from rsjax.claims import PACKS

if TYPE_CHECKING:
  from rsjax.app.bench import Source

__all__ = ["HELP", "add_arguments", "run"]

HELP = "samples per second of certification: compile, memory, FLOPs, MFU, bound"


def add_arguments(p: argparse.ArgumentParser) -> None:
  """The flags of ``rsjax bench``."""
  p.add_argument(
    "model",
    nargs="?",
    default=None,
    metavar="MODEL",
    help="a directory of 'rsjax train' or 'rsjax convert', or an architecture of "
    "rsjax.models (random weights: lenet, resnet20, resnet18, ...)",
  )
  p.add_argument(
    "--arch", default=None, metavar="NAME", help="an architecture of rsjax.models, random weights"
  )
  p.add_argument(
    "--input-shape",
    default=None,
    metavar="H,W,C",
    help="input shape of --arch (default: its dataset's: 28,28,1 LeNet, 32,32,3 CIFAR "
    "ResNets, 224,224,3 ImageNet ResNets) or of the noisy input before --resize",
  )
  flags.positive_flag(p, "--num-classes", "classes of --arch")
  flags.model_source_flags(p)
  flags.positive_flag(
    p, "--sigma", "noise level (default: the model's training sigma, else 0.25)", real=True
  )
  p.add_argument(
    "--precision",
    default="float32",
    help="comma-separated precisions to time: float32, tf32, bfloat16 (fp32, bf16)",
  )
  _sampling_flags(p)
  p.add_argument(
    "--pack",
    type=int,
    default=1,
    choices=list(PACKS),
    help="run the narrow stage on G samples packed in the channels (CIFAR ResNets; "
    "rsjax.models.pack_narrow_stage); a model without one runs unpacked, said so",
  )
  p.add_argument(
    "--fold-bn",
    action="store_true",
    help="fold eval-mode batch norm into the convolutions (rsjax.models.fold_batch_norm)",
  )
  flags.data_flags(p)
  _output_flags(p)


def _sampling_flags(p: argparse.ArgumentParser) -> None:
  flags.positive_flag(p, "--N", "estimation samples per image (target)", default=100_000)
  flags.positive_flag(p, "--N0", "selection samples per image", default=100)
  flags.positive_flag(
    p,
    "--measure-n",
    "estimation samples of the timed calls (default: about 4 s of work per image, at "
    "most 2000 on a CPU and 10000 on an accelerator); s/image at --N is extrapolated",
  )
  p.add_argument("--full", action="store_true", help="time the calls at --N itself")
  flags.positive_flag(
    p,
    "--images",
    "images timed after the warm-up image, in turn, in rounds (3 of 1 s at least; default: as "
    "many images as fit in 20 s, 1 to 5)",
  )
  p.add_argument(
    "--batch",
    type=flags.batch_size,
    default="auto",
    help="forward passes per step, or auto (on a CPU the fastest of a short timed probe, "
    "cached with the compilation cache; elsewhere the largest that fits in memory)",
  )
  p.add_argument("--seed", type=int, default=0, help="seed of the weights, inputs and noise")


def _output_flags(p: argparse.ArgumentParser) -> None:
  p.add_argument("--json", default=None, metavar="F.json", help="write every figure to F.json")
  p.add_argument(
    "--plot",
    default=None,
    metavar="F.png",
    help="plot samples per second against the batch size (a sweep of a few batch sizes, "
    "each in rounds; the run's batch beside the best one)",
  )
  p.add_argument(
    "--twin",
    action="store_true",
    help="also time the PyTorch twin (the same network and weights, tuned: noise on the "
    "device, one batch, channels-last, counts on the device), eager and compiled, as rsjax "
    "was timed, and each side at its best batch of the sweep (--twin sweeps); needs torch "
    "(MLP, CNN, LeNet and the ResNets have a twin)",
  )
  p.add_argument(
    "--twin-compile",
    default="auto",
    metavar="MODES",
    help="torch.compile modes of the compiled twin, tried in order (auto: "
    "max-autotune-no-cudagraphs, reduce-overhead, default), or 'none'",
  )
  p.add_argument("--quiet", action="store_true", help="no progress bar")
  flags.cache_dir_flag(
    p,
    "JAX's persistent compilation cache in DIR, or 'off' (a cached program compiles in "
    "no time: 'off' measures the compilation)",
  )


def _source(args: argparse.Namespace) -> Source:
  from rsjax.app.bench import Source, target

  return Source(
    model=args.model,
    arch=args.arch,
    torch_checkpoint=args.torch_checkpoint,
    torch_arch=args.torch_arch,
    normalize=args.normalize,
    input_shape=None if args.input_shape is None else target.parse_shape(args.input_shape),
    num_classes=args.num_classes,
    denoiser=args.denoiser,
    resize=args.resize,
    sigma=args.sigma,
    pack=args.pack,
    fold_bn=args.fold_bn,
    seed=args.seed,
  )


def run(args: argparse.Namespace) -> int:
  """Runs ``rsjax bench``; returns the exit status."""
  from rsjax.app.bench import Request, bench, load_target, report
  from rsjax.app.bench.run import check_precisions, twin_refusal
  from rsjax.app.bench.sweep import plot

  precisions = check_precisions([p.strip() for p in args.precision.split(",") if p.strip()])
  target = load_target(_source(args))
  why = twin_refusal(target) if args.twin else None
  if why is not None:
    raise CliError(why)
  request = Request(
    precisions=precisions,
    target_n=args.N,
    measure_n=args.measure_n,
    full=args.full,
    n0=args.N0,
    images=args.images,
    batch=args.batch,
    sweep=args.plot is not None,
    dataset=args.dataset,
    data_dir=args.data_dir,
    seed=args.seed,
    twin=args.twin,
    twin_compile=args.twin_compile,
  )
  log = (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
  doc = bench(target, request, progress=not args.quiet, log=log)
  doc["command"] = shlex.join(["rsjax", *getattr(args, "argv", sys.argv[1:])])
  if args.plot:
    m = doc["machine"]
    where = m["cpu"] if m["platform"] == "cpu" else m["device_kind"]
    title = f"rsjax bench {target.name}: {m['platform']}, {where}"
    doc["plot"] = plot(doc["sweep"], args.plot, title=title)
  print("\n".join(report.lines(doc)))
  if args.plot:
    print(f"plot: {doc['plot']}")
  if args.json:
    print(f"json: {report.write_json(args.json, doc)}")
  return 0
