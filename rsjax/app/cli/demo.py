"""``rsjax demo``: train and certify LeNet on the embedded MNIST (minutes, CPU)."""

from __future__ import annotations

import argparse

from rsjax.app.cli import flags
from rsjax.app.cli._args import CliError

__all__ = ["HELP", "add_arguments", "run"]

HELP = "train and certify LeNet on the embedded MNIST (minutes, CPU)"


def add_arguments(p: argparse.ArgumentParser) -> None:
  """The flags of ``rsjax demo``."""
  p.add_argument("--out", default="runs/demo", help="output directory")
  p.add_argument(
    "--sigmas",
    nargs="+",
    type=flags.positive_float,
    default=[0.25, 0.5],
    help="noise levels, one model each",
  )
  flags.positive_flag(p, "--epochs", "training epochs (default: the demo's setting)")
  flags.positive_flag(p, "--N", "estimation samples (default: the demo's setting)")
  flags.positive_flag(p, "--images", "test images certified (default: the demo's setting)")
  p.add_argument("--seed", type=int, default=0, help="PRNG seed")
  p.add_argument(
    "--overwrite",
    action="store_true",
    help="start over the models and rows in OUT made with other settings (by "
    "default the demo reuses only what was made with the same settings and stops "
    "on the rest)",
  )
  p.add_argument("--quiet", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
  """Runs ``rsjax demo``; returns the exit status."""
  from rsjax.app import demo

  try:
    demo.run(
      args.out,
      sigmas=tuple(args.sigmas),
      epochs=args.epochs,
      n=args.N,
      num_images=args.images,
      seed=args.seed,
      progress=not args.quiet,
      overwrite=args.overwrite,
    )
  except ValueError as e:
    raise CliError(str(e)) from None
  return 0
