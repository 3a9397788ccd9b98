"""Certify or predict a whole dataset into a result file, resumably.

Rows are written (flushed and fsynced) as soon as their inputs are done. Running
the same job again after an interruption (even ``kill -9``) skips the indices
already in the file, so the file ends with no duplicate and no missing row.
Because each input's noise derives from the key and its dataset index
(``ids``), a resumed run writes exactly the rows an uninterrupted run would have.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict, Unpack

import jax
import numpy as np
from jax.typing import ArrayLike
from tqdm.auto import tqdm

from rsjax.engine.driver import Batch, Certificate
from rsjax.records import io
from rsjax.records import spec as runspec
from rsjax.runs import record as record_lib
from rsjax.runs.method import Certifier, Context

__all__ = [
  "DatasetOptions",
  "NoCountsError",
  "Written",
  "certify_dataset",
  "certify_inputs",
  "predict_dataset",
  "fingerprint",
  "default_inputs_per_call",
  "INPUTS_PER_CALL",
  "SAMPLES_PER_CALL",
]

PredictFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


class DatasetOptions(TypedDict, total=False):
  """The keywords :func:`certify_dataset` and :func:`predict_dataset` share.

  Attributes:
    inputs_per_call: inputs certified together per call (rows are written after each
      call; the ``time`` column is the call's time divided evenly); None: the function's
      default.
    progress: show a progress bar (default True).
    resume: keep rows already in ``out_path`` and skip their indices (default True).
    run: optional identity of the run (``rsjax.records.spec.RunSpec``, or a JSON dict),
      kept in ``<out_path>.run.json``; resuming rows of a different run raises
      ``rsjax.records.io.RunMismatchError``.
  """

  inputs_per_call: int | None
  progress: bool
  resume: bool
  run: runspec.RunSpec | Mapping | None


# Inputs per engine call when the caller does not choose (certify_dataset,
# predict_dataset, and the command's --inputs-per-call). From benchmarks.calls.per_image
# (benchmarks/RESULTS.md, issue 44): on a 2-core CPU the per-image cost of the
# MLP, LeNet and ResNet-20 does not grow with the inputs per call (1 to 32);
# what more inputs buy is a share of the call's fixed cost (placement, two
# launches, the host statistics; the n0 pass runs at full batch from 10 inputs
# on): with certify at N = 10,000, 16 inputs per call cost 0-9% less per image
# than 1 for the MLP and 1-4% less for LeNet (two runs), 32 no less than 16. That
# share shrinks as 1 / N, so above SAMPLES_PER_CALL / 16 samples per input the
# default shrinks too, to one input per call at N = 100,000 (below 1% to gain
# there, and a row is written, and resumable, per input).
INPUTS_PER_CALL = 16
SAMPLES_PER_CALL = 160_000


class Written(int):
  """The number of rows a run wrote, with ``guarantee``: what the radii of its last
  certificate guarantee (``Certificate.guarantee``), or None when it wrote none."""

  guarantee: str | None = None


class NoCountsError(ValueError):
  """``save_counts`` with a certificate that has no estimation counts."""


def default_inputs_per_call(num: int | None = None) -> int:
  """The default number of inputs per engine call for ``num`` samples per input.

  ``INPUTS_PER_CALL`` (16) when ``num`` is None or small; fewer for large
  ``num``, so that a call draws about ``SAMPLES_PER_CALL`` (160,000) samples at
  most, and never fewer than one input: 16 at N = 10,000, 8 at 20,000, 1 at
  100,000. Counts and certificates do not depend on it (only speed, and how
  often rows are written).
  """
  if num is None:
    return INPUTS_PER_CALL
  return max(1, min(INPUTS_PER_CALL, SAMPLES_PER_CALL // max(int(num), 1)))


def fingerprint(params: Any) -> str:
  """A short hash of a pytree's arrays (names, dtypes, shapes and values).

  Two models with the same fingerprint compute the same function (for the same
  architecture); it identifies the model in a result file's run record. A typed PRNG key
  (a DEQ's Jacobian-regularizer key) counts by its key data.
  """
  h = hashlib.sha256()
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    if jax.dtypes.issubdtype(getattr(leaf, "dtype", None), jax.dtypes.prng_key):
      leaf = jax.random.key_data(leaf)
    a = np.asarray(jax.device_get(leaf))
    h.update(f"{jax.tree_util.keystr(path)}|{a.dtype}|{a.shape}|".encode())
    h.update(np.ascontiguousarray(a).tobytes())
  return h.hexdigest()[:16]


def _run(
  kind: str,
  fn,
  get_batch,
  indices,
  out_path,
  options: DatasetOptions,
  *,
  inputs_per_call: int,
  row_fn,
  columns: Sequence[str] = (),
  restore: Callable | None = None,
  record_fn: Callable | None = None,
) -> Written:
  """The resumable loop shared by certify and predict (``options``' ``inputs_per_call`` as
  the caller resolved it).

  ``row_fn(result, j) -> dict`` gives the ``predict``/``radius``/extra fields of
  row ``j`` of one call's ``result = fn(x, ids)``; ``record_fn(result, j, x_j)``,
  if given, the row's certificate record (``rsjax.runs.record``), written (durably)
  before the row; ``restore(x, predict, radius)`` replays the rows already
  written (file order) into a method's state before resuming.
  """
  if inputs_per_call < 1:
    raise ValueError(f"inputs_per_call must be >= 1, got {inputs_per_call}")
  progress = options.get("progress", True)
  resume, run = options.get("resume", True), options.get("run")
  indices = np.asarray(indices, dtype=np.int64)
  written, guarantee = 0, None
  with io.ResultsWriter(
    out_path, kind=kind, resume=resume, extra_columns=columns, run=run
  ) as writer:
    todo = np.array([i for i in indices if int(i) not in writer.done], dtype=np.int64)
    records = record_lib.RecordWriter(out_path, writer.done) if record_fn is not None else None
    if restore is not None and writer.done:
      done = io.read_certify(out_path)  # rows already written, in processing order
      x_done, _ = get_batch(np.asarray(done.idx))
      restore(np.asarray(x_done), np.asarray(done.predict), np.asarray(done.radius))
    skipped = len(indices) - len(todo)
    if progress and skipped:
      print(
        f"resuming: {skipped} of {len(indices)} rows done ({out_path})", file=sys.stderr, flush=True
      )
    bar = tqdm(total=len(indices), initial=skipped, disable=not progress, desc=kind, unit="input")
    for start in range(0, len(todo), inputs_per_call):
      chunk = todo[start : start + inputs_per_call]
      x, labels = get_batch(chunk)
      t0 = time.perf_counter()
      result = fn(np.asarray(x), chunk)
      dt = (time.perf_counter() - t0) / len(chunk)
      guarantee = getattr(result, "guarantee", None)
      x = np.asarray(x)
      for j, i in enumerate(chunk):
        fields = row_fn(result, j)
        if records is not None:
          records.write(int(i), record_fn(result, j, x[j]))
        writer.write(idx=int(i), label=int(labels[j]), time=dt, **fields)
        written += 1
      bar.update(len(chunk))
    bar.close()
    if records is not None:
      records.close()
  out = Written(written)
  out.guarantee = guarantee
  return out


def certify_inputs(ctx: Context, certifier: Certifier, x: Any, ids: Any) -> Certificate:
  """``rsjax.certify(ctx.key, apply_fn, params, x, sigma=certifier.sigma_of(ctx), ids=ids,
  certifier=certifier, settings=ctx.settings)`` of a run's inputs ``x [b, ...]`` with their
  dataset indices ``ids [b]`` (``apply_fn, params = certifier.classifier(ctx)``)."""
  return _chunks(ctx, certifier)(x, ids)


def _chunks(ctx: Context, certifier: Certifier) -> Callable[[Any, Any], Certificate]:
  """:func:`certify_inputs` of a run, its classifier and sigma asked once."""
  (apply_fn, params), sigma = certifier.classifier(ctx), certifier.sigma_of(ctx)
  key, classes, settings = ctx.key, ctx.dataset.num_classes, ctx.settings
  return lambda x, ids: certifier.certify(
    Batch(key, apply_fn, params, x, sigma, classes, settings, ids)
  )


def certify_dataset(
  ctx: Context,
  certifier: Certifier,
  get_batch: Callable[[np.ndarray], tuple],
  indices: ArrayLike,
  out_path: str | os.PathLike,
  *,
  record: bool = False,
  n: int | None = None,
  save_counts: bool = False,
  **options: Unpack[DatasetOptions],
) -> Written:
  """Certifies ``indices`` of a dataset with a method's certifier, one row per input in
  ``out_path``: each chunk ``x`` of inputs is ``rsjax.certify(ctx.key, apply_fn, params, x,
  sigma=certifier.sigma_of(ctx), ids=ids, certifier=certifier, settings=ctx.settings)``
  (``apply_fn, params = certifier.classifier(ctx)``;
  :func:`certify_inputs`).

  Each row is the certificate's: ``predict``, ``radius``, the certifier's extra
  ``columns`` (``Certificate.row_fields``) and, with ``record``, its
  certificate record (``rsjax.runs.record.row`` and ``Certificate.record_fields``).

  Args:
    ctx: the run's ``rsjax.runs.method.Context`` (key, classifier, classes, settings).
    certifier: an ``rsjax.runs.method.Certifier`` (a method's, ``Method.build``). Where it
      is ``sequential`` its ``restore`` replays the rows already in ``out_path`` into its
      state (the DDRS memory) before resuming; its ``inputs_per_call`` is the default of
      ``inputs_per_call``.
    get_batch: ``get_batch(indices [b]) -> (x [b, ...], labels [b])``.
    indices: dataset indices to certify, in order.
    out_path: the certify result file (Cohen et al.'s format).
    record: keep the certificate record of every row (its selection and
      estimation counts, bound and input fingerprint) in
      ``<out_path>.cert.jsonl`` (``rsjax.runs.record``; ``rsjax verify`` checks it).
    n: estimation samples per input, for the record (budgeted certificates
      record their own per input).
    save_counts: add the estimation counts of each row as a column
      (``rsjax.metrics.COUNTS_COLUMN``; ``rsjax analyze --pa-cdf``).
    **options: :class:`DatasetOptions` (``inputs_per_call`` None: the certifier's, else
      :func:`default_inputs_per_call` of ``n``).

  Returns:
    The number of rows written by this call (a :class:`Written`: also the
    ``guarantee`` of the last certificate).

  Raises:
    rsjax.records.io.ResultsLockedError: another run is writing ``out_path``.
    rsjax.records.io.RunMismatchError: see ``run``.
    ValueError: a malformed row in ``out_path`` (named by line), or a
      certificate whose columns or record fields are not the certifier's.
  """
  columns = tuple(certifier.columns)
  if save_counts:
    from rsjax.metrics import COUNTS_COLUMN, format_counts

    columns = (*columns, COUNTS_COLUMN)

  def row(cert, j):
    extra = cert.row_fields(j)
    if save_counts:
      if getattr(cert, "counts", None) is None:
        raise NoCountsError("this method's certificate has no counts")
      extra = {**extra, COUNTS_COLUMN: format_counts(cert.counts[j])}
    if set(extra) != set(columns):
      raise ValueError(
        f"the certificate fills the columns {sorted(extra)}, the certifier declares "
        f"{sorted(columns)}"
      )
    return dict(predict=int(cert.prediction[j]), radius=float(cert.radius[j]), **extra)

  def record_fn(cert, j, x_j):
    out = record_lib.row(cert, j, x_j, n=n)
    extra = cert.record_fields(j)
    clash = sorted(set(extra) & set(out))
    if clash:
      raise ValueError(f"the method's record fields {clash} clash with the common ones")
    return {**out, **extra}

  inputs_per_call = options.get("inputs_per_call")
  if inputs_per_call is None:
    inputs_per_call = certifier.inputs_per_call or default_inputs_per_call(n)
  return _run(
    "certify",
    _chunks(ctx, certifier),
    get_batch,
    indices,
    out_path,
    options,
    inputs_per_call=inputs_per_call,
    row_fn=row,
    columns=columns,
    restore=certifier.restore if certifier.sequential else None,
    record_fn=record_fn if record else None,
  )


def predict_dataset(
  predict_fn: PredictFn,
  get_batch: Callable[[np.ndarray], tuple],
  indices: ArrayLike,
  out_path: str | os.PathLike,
  **options: Unpack[DatasetOptions],
) -> int:
  """Like :func:`certify_dataset` for PREDICT (``predict_fn(x, ids) -> [b] classes``).

  ``options``' ``inputs_per_call`` None (or 0): ``INPUTS_PER_CALL`` (16).
  """
  return _run(
    "predict",
    predict_fn,
    get_batch,
    indices,
    out_path,
    options,
    inputs_per_call=options.get("inputs_per_call") or default_inputs_per_call(),
    row_fn=lambda pred, j: {"predict": int(pred[j])},
  )
