"""One certify run from its value: ``run(spec, loaded) -> Report``.

Every path that certifies a dataset goes through :func:`run`: ``rsjax certify``
(flags -> ``prepare`` -> ``run``), ``rsjax demo`` and the experiments; how it runs (batch,
progress, resuming) is an :class:`Execution`, never part of the run's value. It plans
the method (:func:`rsjax.app.launch.spec.plan`), certifies this process' share of
the declared rows into the result file (resuming rows already there, or
starting over), and, on several processes, merges the shares on process 0. The
file it leaves is a run that ``rsjax verify`` reads.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import TYPE_CHECKING

import numpy as np

from rsjax.app.launch import spec as spec_lib
from rsjax.app.launch.errors import RunError
from rsjax.util import compile_clock

if TYPE_CHECKING:
  from rsjax.engine.batch_timing import BatchChoice
  from rsjax.records.spec import RunSpec

__all__ = ["Execution", "Report", "batch_choice", "run"]


@dataclasses.dataclass(frozen=True)
class Execution:
  """How :func:`run` certifies a run: speed and the result file, never the counts.

  Attributes:
    batch_size: noisy samples per forward pass, ``"auto"`` (the memory fit) or None (a
      timed probe's where it pays: :func:`batch_choice`). The record's ``versions.batch``
      says which batch ran and how it was chosen.
    inputs_per_call: inputs per engine call (None: the method's default).
    progress: a progress bar.
    overwrite: start the result file over instead of resuming the rows already there.
    on_mismatch: rows of another run in the file (``rsjax.records.io.RunMismatchError``):
      ``"error"`` raises, ``"restart"`` says so and starts the file over.
  """

  batch_size: int | str | None = None
  inputs_per_call: int | None = None
  progress: bool = True
  overwrite: bool = False
  on_mismatch: str = "error"


@dataclasses.dataclass(frozen=True)
class Report:
  """What one :func:`run` did.

  Attributes:
    run: the run as recorded (its ``details`` filled in by the method's plan).
    path: the result file.
    written: rows this call wrote (rows resumed from the file are not counted).
    mine: rows selected in this process.
    selected: rows the run declares (all processes).
    process: ``(index, count)`` of this process.
    seconds: wall seconds of the certification (planning and compiling included).
    compile_seconds: of those, JAX's tracing, lowering and compiling (its
      ``jax.monitoring`` events; near 0 when the persistent cache had the programs).
    describe: the method's one-line description.
    guarantee: what the radii of the last certificate guarantee, or None.
  """

  run: RunSpec
  path: str
  written: int
  mine: int
  selected: int
  process: tuple[int, int]
  seconds: float
  compile_seconds: float
  describe: str
  guarantee: str | None


def run(
  spec: RunSpec,
  loaded: spec_lib.Loaded,
  *,
  execution: Execution = Execution(),
  save_counts: bool = False,
  data_dir: str | None = None,
  process: tuple[int, int] = (0, 1),
) -> Report:
  """Certifies the rows ``spec`` declares into ``spec.out``, with its record.

  Args:
    spec: the run (:func:`rsjax.app.launch.prepare`); ``spec.out`` is the result file.
    loaded: what it certifies (from ``prepare``, or :func:`rsjax.app.launch.spec.load`).
    execution: how (:class:`Execution`): batch, inputs per call, progress, resuming.
    save_counts: add the estimation counts column.
    data_dir: where datasets live (a method that reads another split).
    process: ``(index, count)``: each process certifies a strided share of the
      rows into its own file; process 0 merges them (after a barrier). Noise
      depends only on the key and an input's index, so the merged file equals a
      one-process run.

  Returns:
    A :class:`Report`.

  Raises:
    RunError: a setting the method refuses, or a sequential method on several processes.
    rsjax.records.io.RunMismatchError: rows of another run in the file (``on_mismatch``
      ``"error"``).
  """
  from rsjax.records import io

  try:
    return _run(spec, loaded, execution, not execution.overwrite, save_counts, data_dir, process)
  except io.RunMismatchError as e:
    if execution.on_mismatch != "restart":
      raise
    print(f"{e}: certifying again", flush=True)
  return _run(spec, loaded, execution, False, save_counts, data_dir, process)


def _run(spec, loaded, execution, resume, save_counts, data_dir, process) -> Report:
  """:func:`run`, resuming the file or not."""
  from rsjax.runs import distributed, record, runner

  if spec.out is None:
    raise RunError("out: the run names no result file (RunSpec.out)", "out")
  pid, nproc = process
  out = str(spec.out)
  t0 = time.perf_counter()
  with compile_clock() as compiling:
    indices = np.asarray(spec.indices(), np.int64)
    mine = distributed.split_indices(indices, process_index=pid, process_count=nproc)
    choice = batch_choice(spec, loaded, execution.batch_size, rows=len(mine))
    ctx, certifier = spec_lib.plan(spec, loaded, batch_size=choice.batch, data_dir=data_dir)
    versions = {**spec.versions, "batch": choice.describe()}
    spec = dataclasses.replace(spec, details=certifier.details(ctx), versions=versions)
    if certifier.sequential and nproc > 1:
      raise RunError(
        f"method {spec.method} certifies inputs one after another in one process", "process"
      )
    parts = [
      distributed.process_path(out, process_index=p, process_count=nproc) for p in range(nproc)
    ]
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    try:
      wrote = runner.certify_dataset(
        ctx,
        certifier,
        loaded.dataset.get_batch,
        mine,
        out if nproc == 1 else parts[pid],
        inputs_per_call=execution.inputs_per_call,
        progress=execution.progress,
        resume=resume,
        run=spec,
        record=True,
        n=spec.sampling.n,
        save_counts=save_counts,
      )
    except runner.NoCountsError as e:
      raise RunError(f"save_counts: {e}", "save_counts") from None
  seconds = time.perf_counter() - t0
  if nproc > 1:
    distributed.barrier("rsjax-certify-rows-written")
    if pid == 0:
      distributed.merge_rows(parts, out)
      spec.write(out)
      record.merge(parts, out)
  return Report(
    run=spec,
    path=out,
    written=int(wrote),
    mine=len(mine),
    selected=len(indices),
    process=(pid, nproc),
    seconds=seconds,
    compile_seconds=compiling[0],
    describe=certifier.describe(ctx),
    guarantee=wrote.guarantee,
  )


def batch_choice(
  spec: RunSpec, loaded: spec_lib.Loaded, batch_size: int | str | None, *, rows: int
) -> BatchChoice:
  """The engine batch of a run of ``rows`` rows (``rsjax.engine.batch_timing``): as given;
  else, where the batch changes speed only (``Method.timed_batch``, and not a budgeted
  run, whose rounds are sized by it), the timed probe's where it pays, or the memory fit
  (``"auto"``); else ``rsjax.engine.driver.DEFAULT_BATCH``."""
  from rsjax import methods
  from rsjax.engine import batch_timing, precision
  from rsjax.engine.driver import DEFAULT_BATCH

  fixed = not methods.get(spec.method).timed_batch or spec.options.get("grid") is not None
  if batch_size is None and fixed:
    return batch_timing.BatchChoice(DEFAULT_BATCH, "default")
  return batch_timing.choose_batch_size(
    loaded.apply_fn,
    loaded.params,
    loaded.dataset.input_shape,
    num=spec.sampling.n,
    inputs=max(rows, 1),
    batch_size=batch_size,
    compute_dtype=precision.compute_dtype(spec.sampling.precision),
  )
