"""``rsjax bench``: how many noisy samples per second a model certifies (``rsjax.certify``), in
which precision, how far from the device's limit; its figures as a table, JSON and a plot."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from typing import TYPE_CHECKING

from rsjax.app.cli import flags
from rsjax.app.cli._args import CliError
from rsjax.claims import PACKS

if TYPE_CHECKING:
  from collections.abc import Callable

  from rsjax.app.bench import Request, Source, Target

__all__ = ["HELP", "add_arguments", "run"]

HELP = "samples per second of certification: compile, memory, FLOPs, MFU, bound"


def add_arguments(p: argparse.ArgumentParser) -> None:
  """The flags of ``rsjax bench``."""
  p.add_argument(
    "model",
    nargs="?",
    metavar="MODEL",
    help="a directory of 'rsjax train' or 'rsjax convert', or an architecture of "
    "rsjax.models (random weights: lenet, resnet20, resnet18, ...)",
  )
  p.add_argument("--arch", metavar="NAME", help="an architecture of rsjax.models, random weights")
  p.add_argument(
    "--input-shape",
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
  _ablation_flags(p)
  _output_flags(p)


def _ablation_flags(p: argparse.ArgumentParser) -> None:
  q = p.add_argument_group("ablation workloads (a model of encoded images, H,W,2C)")
  q.add_argument(
    "--method",
    choices=("patch", "ablation"),
    default=None,
    help="time derandomized smoothing (patch: band or block positions per second) or "
    "randomized ablation (ablation: samples per second) instead of Gaussian noise",
  )
  q.add_argument("--ablation", choices=("column", "row", "block"), default="column",
                 help="--method patch: the kept region")  # fmt: skip
  flags.positive_flag(q, "--ablation-size", "--method patch: band width or block side", default=4)
  flags.positive_flag(q, "--keep", "--method ablation: pixels kept", default=45)
  q.add_argument("--drop-tokens", action="store_true",
                 help="--method patch with a ViT: only the kept tokens go through it")  # fmt: skip


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
    "(MLP, CNN, LeNet and the ResNets have a twin; a --torch-module is its own)",
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
  """The :class:`~rsjax.app.bench.Source` the flags name (each field the flag of its name)."""
  from rsjax.app.bench import Source, target

  given = {f.name: getattr(args, f.name) for f in dataclasses.fields(Source)}
  if args.input_shape is not None:
    given["input_shape"] = target.parse_shape(args.input_shape)
  return Source(**given)


def run(args: argparse.Namespace) -> int:
  """Runs ``rsjax bench``; returns the exit status."""
  from rsjax.app.bench import Request, bench, load_target, report
  from rsjax.app.bench.run import check_precisions, twin_refusal
  from rsjax.app.bench.sweep import plot

  precisions = check_precisions([p.strip() for p in args.precision.split(",") if p.strip()])
  if args.method is not None and (args.twin or args.plot):
    raise CliError("--twin and --plot time Gaussian noise; not with --method")
  target = load_target(_source(args))
  why = twin_refusal(target) if args.twin else None
  if why is not None:
    raise CliError(why)
  same = "measure_n full images batch dataset data_dir seed twin twin_compile".split()
  request = Request(
    precisions=precisions,
    target_n=args.N,
    n0=args.N0,
    sweep=args.plot is not None,
    **{name: getattr(args, name) for name in same},
  )
  log = (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
  if args.method is not None:
    return _run_ablation(args, target, request, log)
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


def _run_ablation(
  args: argparse.Namespace, target: Target, request: Request, log: Callable[[str], None]
) -> int:
  """``rsjax bench --method patch`` / ``ablation`` (:mod:`rsjax.app.bench.ablation`)."""
  from rsjax.app.bench import ablation, report

  options = {"ablation": args.ablation, "ablation_size": args.ablation_size}
  options["drop_tokens"] = args.drop_tokens
  if args.method == "ablation":
    options = {"keep": args.keep}
  doc = ablation.bench_ablation(target, request, args.method, options, log=log)
  doc["command"] = shlex.join(["rsjax", *getattr(args, "argv", sys.argv[1:])])
  print("\n".join(ablation.lines(doc)))
  if args.json:
    print(f"json: {report.write_json(args.json, doc)}")
  return 0
