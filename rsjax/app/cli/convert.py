"""``rsjax convert``: a PyTorch checkpoint, or any PyTorch module through ``torch.export``
(``--torch-module``), into a model directory (certified later without PyTorch)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from rsjax.app import launch
from rsjax.app.cli import flags
from rsjax.app.cli._args import CliError

__all__ = ["HELP", "add_arguments", "run"]

HELP = "convert a PyTorch checkpoint into a model directory (certify it later without PyTorch)"


def add_arguments(p: argparse.ArgumentParser) -> None:
  """The flags of ``rsjax convert``."""
  p.add_argument(
    "checkpoint",
    nargs="?",
    help="PyTorch checkpoint (.pth, .pth.tar); with --torch-module FILE.py:CLASS its state "
    "dict (optional); none with --torch-module FILE.pt",
  )
  p.add_argument("out", help="output model directory (as written by 'rsjax train')")
  p.add_argument(
    "--arch",
    default=None,
    help="architecture (default: the checkpoint's 'arch' entry or recognized from "
    "its keys): cifar_resnet20, cifar_resnet110, resnet18, resnet50, lenet, ...",
  )
  p.add_argument(
    "--torch-module",
    default=None,
    metavar="SPEC",
    help="convert any PyTorch module through torch.export: FILE.pt (a torch.save'd "
    "nn.Module, unpickled: trusted files only) or FILE.py:CLASS (built with no arguments); "
    "it takes NCHW inputs in [0, 1] (--normalize: normalized first)",
  )
  p.add_argument(
    "--input-shape",
    default=None,
    metavar="H,W,C",
    help="one input of --torch-module as rsjax sees it (default: --dataset's)",
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

  if args.torch_module is not None:
    model, config = _module(args)
    config["source"] = os.path.basename(args.torch_module)
  elif args.checkpoint is None:
    raise CliError("give a PyTorch checkpoint, or --torch-module SPEC")
  else:
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
    f"{args.torch_module or args.checkpoint}; saved in {args.out}"
  )
  return 0


def _module(args: argparse.Namespace) -> tuple[Any, dict]:
  """``(model, config)`` of ``--torch-module`` at ``--input-shape`` (or ``--dataset``'s)."""
  from rsjax.app.bench.target import parse_shape

  if args.arch is not None:
    raise CliError("--arch names a known architecture; --torch-module needs none")
  shape = None
  if args.input_shape is not None:
    shape = parse_shape(args.input_shape)
  elif args.dataset is not None:
    shape = tuple(launch.open_dataset(args.dataset, "test", None).input_shape)
  model, config, _ = launch.open_torch_module(
    args.torch_module, args.checkpoint, args.normalize, shape
  )
  return model, config
