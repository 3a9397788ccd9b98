"""``rsjax convert``: a PyTorch checkpoint into a model directory (certified later
without PyTorch)."""

from __future__ import annotations

import argparse
import os

from rsjax.app import launch
from rsjax.app.cli import flags
from rsjax.app.cli._args import CliError

__all__ = ["HELP", "add_arguments", "run"]

HELP = "convert a PyTorch checkpoint into a model directory (certify it later without PyTorch)"


def add_arguments(p: argparse.ArgumentParser) -> None:
  """The flags of ``rsjax convert``."""
  p.add_argument("checkpoint", help="PyTorch checkpoint (.pth, .pth.tar)")
  p.add_argument("out", help="output model directory (as written by 'rsjax train')")
  p.add_argument(
    "--arch",
    default=None,
    help="architecture (default: the checkpoint's 'arch' entry or recognized from "
    "its keys): cifar_resnet20, cifar_resnet110, resnet18, resnet50, lenet, ...",
  )
  flags.normalize_flag(p)
  p.add_argument(
    "--dataset", default=None, help="record the dataset (the default dataset of certify)"
  )
  flags.positive_flag(
    p, "--sigma", "record the training sigma (the default sigma of certify)", real=True
  )


def run(args: argparse.Namespace) -> int:
  """Runs ``rsjax convert``; returns the exit status."""
  from rsjax import models

  model, config = launch.open_torch_checkpoint(args.checkpoint, args.arch, args.normalize)
  config["source"] = os.path.basename(args.checkpoint)
  if args.dataset is not None:
    config["dataset"] = args.dataset
  if args.sigma is not None:
    config["sigma"] = args.sigma
  try:
    models.save_model(args.out, model, config)
  except ValueError as e:
    raise CliError(str(e)) from None
  print(
    f"converted {config['torch_arch']} ({config['num_classes']} classes) from "
    f"{args.checkpoint}; saved in {args.out}"
  )
  return 0
