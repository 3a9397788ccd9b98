"""``rsjax audit``: with the model, draw the counts of random rows of a certify run again
(``rsjax.app.audit``)."""

from __future__ import annotations

import argparse

from rsjax.app.cli import flags
from rsjax.app.cli._args import CliError, parent_flag

__all__ = ["HELP", "add_arguments", "run"]

HELP = (
  "with the model, draw the counts of random rows of a certify run again "
  "(after verifying it); exit status 1 if the run fails"
)


def _rows(text: str) -> str | int:
  return "all" if text == "all" else flags.positive_int(text)


def add_arguments(p: argparse.ArgumentParser) -> None:
  """The flags of ``rsjax audit``."""
  p.add_argument("file", help="certify result file (with its .run.json and .cert.jsonl)")
  p.add_argument("--model-dir", default=None, help="the model directory the run certified")
  p.add_argument(
    "--torch-checkpoint",
    default=None,
    metavar="F.pth",
    help="the PyTorch checkpoint the run certified, instead of --model-dir",
  )
  p.add_argument(
    "--denoiser",
    default=None,
    metavar="DIR",
    help="the denoiser of a denoised run (default: the directory it recorded)",
  )
  p.add_argument(
    "--parent-model-dir",
    default=None,
    metavar="DIR",
    help="a recertified run's parent model: audit the parent run it names too (same rows)",
  )
  parent_flag(p)
  p.add_argument(
    "--experts-dir",
    default=None,
    metavar="DIR",
    help="the folder a Dual RS run's experts were moved to, each found by its folder's name "
    "(default: where the record names them, relative to the result file's folder)",
  )
  p.add_argument("--data-dir", default=None, help="TFDS data_dir or folder of the run's dataset")
  p.add_argument("--rows", type=_rows, default=20, help="rows drawn again (default 20), or 'all'")
  p.add_argument(
    "--seed",
    type=int,
    default=None,
    help="seed of the choice of rows (default: a fresh one, printed; give it to repeat an audit)",
  )
  flags.positive_flag(p, "--batch", "forward passes per step (speed only)", default=1000)
  p.add_argument("--quiet", action="store_true", help="print the summary line only")


def run(args: argparse.Namespace) -> int:
  """Runs ``rsjax audit``; returns the exit status."""
  from rsjax.app import audit

  if args.model_dir is None and args.torch_checkpoint is None:
    raise CliError("give the run's model: --model-dir DIR (or --torch-checkpoint F.pth)")
  try:
    report = audit.audit(
      args.file,
      model_dir=args.model_dir,
      rows=args.rows,
      seed=args.seed,
      data_dir=args.data_dir,
      torch_checkpoint=args.torch_checkpoint,
      denoiser=args.denoiser,
      batch_size=args.batch,
      parent_model_dir=args.parent_model_dir,
      experts_dir=args.experts_dir,
      parent=args.parent,
    )
  except (audit.AuditError, ValueError) as e:
    raise CliError(str(e)) from None
  if not args.quiet:
    print(f"rows drawn (seed {report.seed}): {list(report.rows)}")
    for c in report.checks:
      print(c)
  print(report.summary())
  return 0 if report.ok else 1
