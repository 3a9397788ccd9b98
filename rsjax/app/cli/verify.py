"""``rsjax verify``: recompute every radius and prediction of certify runs from their
recorded counts (SciPy only: no model, no device)."""

from __future__ import annotations

import argparse

from rsjax.app.cli import flags
from rsjax.app.cli._args import CliError, parent_flag

__all__ = ["HELP", "add_arguments", "run"]

HELP = (
  "recompute every radius and prediction of certify runs from their "
  "recorded counts (SciPy only: no model, no device); exit status 1 if a row "
  "does not match"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
  """The flags of ``rsjax verify``."""
  p.add_argument(
    "files", nargs="+", help="certify result files (with their .run.json and .cert.jsonl)"
  )
  p.add_argument(
    "--show", type=flags.nonneg_int, default=20, help="rows that do not match to print"
  )
  p.add_argument(
    "--accept-unbound",
    action="store_true",
    help="verify rsjax-run/2 records, whose key does not bind the claim (alpha, multiclass, "
    "declared range may have been chosen after the draw); refused by default",
  )
  parent_flag(p)
  p.add_argument(
    "--data-dir",
    default=None,
    help="TFDS data_dir or folder of the run's dataset (labels and inputs checked against it, "
    "a folder's images against the record; a ddrs run's memory step is replayed from the "
    "inputs; the bundled datasets need none)",
  )


def run(args: argparse.Namespace) -> int:
  """Runs ``rsjax verify``; returns the exit status."""
  from rsjax import verify

  status = 0
  for path in args.files:
    try:
      report = verify.verify(
        path, data_dir=args.data_dir, accept_unbound=args.accept_unbound, parent=args.parent
      )
    except (verify.VerifyError, ValueError) as e:
      raise CliError(str(e)) from None
    for m in report.mismatches[: args.show]:
      print(f"{path}: {m}")
    if len(report.mismatches) > args.show:
      print(f"{path}: ... and {len(report.mismatches) - args.show} more")
    print(report.summary())
    status = status or (0 if report.ok else 1)
  return status
