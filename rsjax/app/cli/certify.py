"""``rsjax certify``: certify a dataset (CERTIFY of Cohen et al.) with a method of
``rsjax.methods``, into a result file with its run and certificate records."""

from __future__ import annotations

import argparse

from rsjax.app import launch
from rsjax.app.cli import flags
from rsjax.app.cli._args import CliError

__all__ = ["HELP", "add_arguments", "run"]

HELP = "certify a dataset (CERTIFY of Cohen et al.)"


def add_arguments(p: argparse.ArgumentParser) -> None:
  """The flags of ``rsjax certify``, in groups (``flags.add_certify_flags``)."""
  p.usage = "%(prog)s [MODEL_DIR] OUTFILE [flags]"
  out = flags.add_certify_flags(p)
  flags.cache_dir_flag(
    out,
    "JAX's persistent compilation cache (and XLA's GPU autotune cache) in DIR, or 'off': "
    "a later run compiles nothing (the global --compilation-cache, after the command)",
  )


def run(args: argparse.Namespace) -> int:
  """Runs ``rsjax certify``; returns the exit status."""
  from rsjax.runs import distributed

  try:
    pid, nproc = distributed.initialize(args.coordinator, args.num_processes, args.process_id)
  except ValueError as e:
    raise CliError(str(e)) from None
  if nproc > 1:
    print(f"rsjax certify: {distributed.joined()}", flush=True)
  if args.N < args.N0:
    raise CliError(
      f"--N {args.N} is smaller than --N0 {args.N0}: N counts the estimation "
      "samples that bound p_A, N0 the few that select the class (Cohen et al.: "
      "N0 100, N 100000); swap them?"
    )
  spec, loaded = flags.run_from_flags(args)
  execution = launch.Execution(
    batch_size=flags.batch_of(args),
    inputs_per_call=args.inputs_per_call,
    progress=not args.quiet,
    overwrite=args.overwrite,
  )
  report = launch.run(
    spec,
    loaded,
    execution=execution,
    save_counts=args.save_counts,
    data_dir=args.data_dir,
    process=(pid, nproc),
  )
  print(
    f"certified {report.written} new inputs in {report.seconds:.2f}s "
    f"({report.compile_seconds:.2f}s of it compiling; "
    f"{report.mine} of {report.selected} selected in process {pid} of {nproc}); "
    f"results in {report.path}"
  )
  print(f"batch: {report.run.versions.get('batch')}")
  pack = f"; pack: {args.pack}" if args.pack != 1 else ""
  print(f"method: {report.describe}; precision: {args.precision}{pack}")
  if report.guarantee:
    print(f"guarantee: {report.guarantee}")
  return 0
