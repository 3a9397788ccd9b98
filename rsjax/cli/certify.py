"""``rsjax certify``: certify a dataset (CERTIFY of Cohen et al.) with a method of
``rsjax.methods``, into a result file with its run and certificate records."""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import numpy as np

from rsjax import launch
from rsjax.launch import flags
from rsjax.launch.errors import CliError

__all__ = ["HELP", "add_arguments", "run"]

HELP = "certify a dataset (CERTIFY of Cohen et al.)"


def add_arguments(p: argparse.ArgumentParser) -> None:
  """The flags of ``rsjax certify``."""
  flags.add_certify_flags(p)
  p.add_argument(
    "--cache-dir",
    dest="compilation_cache",
    default=argparse.SUPPRESS,
    metavar="DIR",
    help="JAX's persistent compilation cache (and XLA's GPU autotune cache) in DIR, or 'off': "
    "a later run compiles nothing (the global --compilation-cache, after the command)",
  )


def run(args: argparse.Namespace) -> int:
  """Runs ``rsjax certify``; returns the exit status."""
  from rsjax import distributed

  try:
    pid, nproc = distributed.initialize(args.coordinator, args.num_processes, args.process_id)
  except ValueError as e:
    raise CliError(str(e)) from None
  if nproc > 1:
    print(f"rsjax certify: {distributed.joined()}", flush=True)
  from rsjax import runner

  if args.N < args.N0:
    raise CliError(
      f"--N {args.N} is smaller than --N0 {args.N0}: N counts the estimation "
      "samples that bound p_A, N0 the few that select the class (Cohen et al.: "
      "N0 100, N 100000); swap them?"
    )
  run, loaded = launch.run_from_flags(args)
  ds = loaded.dataset
  plan = launch.plan(run, loaded, batch_size=args.batch, data_dir=args.data_dir)
  run = dataclasses.replace(run, details=plan.details)
  indices = np.asarray(run.indices(), np.int64)
  if plan.sequential and nproc > 1:
    raise CliError(f"--method {args.method} certifies inputs one after another in one process")
  os.makedirs(os.path.dirname(os.path.abspath(args.outfile)), exist_ok=True)
  # Several processes (hosts): each certifies a strided share of the indices into
  # its own rows file; process 0 merges them. The noise of an input depends only
  # on the key and its index, so the merged file equals a single-process run.
  mine = distributed.split_indices(indices, process_index=pid, process_count=nproc)
  path = (
    args.outfile
    if nproc == 1
    else distributed.process_path(args.outfile, process_index=pid, process_count=nproc)
  )
  t0 = time.perf_counter()
  try:
    wrote = runner.certify_dataset(
      plan,
      ds.get_batch,
      mine,
      path,
      inputs_per_call=args.inputs_per_call,
      progress=not args.quiet,
      resume=not args.overwrite,
      run=run,
      record=True,
      n=args.N,
      save_counts=args.save_counts,
    )
  except runner.NoCountsError as e:
    raise CliError(f"--save-counts: {e}") from None
  if nproc > 1:
    distributed.barrier("rsjax-certify-rows-written")
    if pid == 0:
      distributed.merge_rows(
        [
          distributed.process_path(args.outfile, process_index=p, process_count=nproc)
          for p in range(nproc)
        ],
        args.outfile,
      )
      run.write(args.outfile)
      from rsjax import record

      record.merge(
        [
          distributed.process_path(args.outfile, process_index=p, process_count=nproc)
          for p in range(nproc)
        ],
        args.outfile,
      )
  print(
    f"certified {wrote} new inputs in {time.perf_counter() - t0:.1f}s "
    f"({len(mine)} of {len(indices)} selected in process {pid} of {nproc}); "
    f"results in {args.outfile}"
  )
  pack = f"; pack: {args.pack}" if args.pack != 1 else ""
  print(f"method: {plan.describe}; precision: {args.precision}{pack}")
  if wrote.guarantee:
    print(f"guarantee: {wrote.guarantee}")
  return 0
