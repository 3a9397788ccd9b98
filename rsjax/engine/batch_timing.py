"""The engine's batch chosen by time: a short timed probe over candidate batches.

On a CPU the fastest forward batch is not the largest that fits: once a step's
activations leave the caches, a larger batch runs slower (LeNet on a 2-core CPU:
about 1.5x more samples per second at 256 than at 1000), and where the peak lies
depends on the model, the machine and the precision. :func:`choose_batch_size`
therefore times the engine's own step (``rsjax.engine.step.step_counts``: noise,
forward pass, argmax, count, in a device loop) at each candidate batch that fits
in memory, alternating the candidates over :data:`ROUNDS` rounds, and keeps the
batch of the best median. Counts never depend on the batch (the key schedule),
so the choice changes speed only.

The probe costs a compilation per candidate and a few seconds of sampling, so it
runs only where it pays: on a CPU (on an accelerator the largest batch that fits is
the fast one, ``rsjax.engine.batching.auto_batch_size``), for a call of at least
:data:`PAYS` times the probe's samples. Its result is kept for the process and, when
JAX's persistent compilation cache is on, in a JSON file beside the compiled programs
(:data:`CACHE_FILE`), keyed by the model's program, the input shape, the precision,
the device and the versions; a later call or run reads it instead of probing again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from rsjax import noise as noise_lib
from rsjax.engine.batching import auto_batch_size, even_steps, params_signature
from rsjax.engine.step import ApplyFn, cast_floating, make_chunk_plan, step_counts
from rsjax.util import PyTree, check_int

__all__ = [
  "BatchChoice",
  "CACHE_FILE",
  "CANDIDATES",
  "PAYS",
  "ROUNDS",
  "choose_batch_size",
  "time_batches",
]

#: Batches the probe may try (those up to the memory fit, and the fit itself).
CANDIDATES = (32, 64, 128, 256, 512, 1024, 2048)
#: Timed rounds per candidate (the candidates alternate within a round).
ROUNDS = 3
#: Seconds one timed call of a candidate aims at.
ROUND_S = 0.2
#: A call pays for the probe when it draws at least this many samples (20 images at
#: N = 100,000): the probe's compilations and timed calls then cost a few percent of it.
PAYS = 2_000_000
#: The probe's results, in JAX's persistent compilation cache directory.
CACHE_FILE = "rsjax-batch-probe.json"
#: The batch of a call too small for the probe to pay, where nothing is known (the
#: library's historical default), on inputs up to this many values; larger inputs
#: take the memory fit.
SMALL_CALL_BATCH = 1000
_SMALL_INPUT = 4096

_MEMO: dict[tuple, BatchChoice] = {}


@dataclasses.dataclass(frozen=True)
class BatchChoice:
  """The engine batch of a call and how it was chosen.

  Attributes:
    batch: forward passes per step.
    how: ``"given"`` (by the caller), ``"timed"`` (the probe ran), ``"cached"``
      (an earlier probe's result), ``"memory"`` (the largest that fits,
      ``auto_batch_size``) or ``"default"`` (a call too small for the probe).
    rates: ``(batch, min, median, max samples/s)`` of each candidate the probe
      timed (empty unless timed or cached).
  """

  batch: int
  how: str
  rates: tuple[tuple[int, float, float, float], ...] = ()

  def describe(self) -> str:
    """One line: the batch and how it was chosen (a run record's ``versions.batch``)."""
    how = {
      "given": "given",
      "default": "not told; too short a run for a timed probe",
      "memory": "the largest that fits in memory",
      "timed": "timed probe",
      "cached": "an earlier timed probe",
    }[self.how]
    if self.rates:
      how += ", samples/s median (min-max): " + ", ".join(
        f"{b}: {med:,.0f} ({lo:,.0f}-{hi:,.0f})" for b, lo, med, hi in self.rates
      )
    return f"{self.batch} ({how})"


def time_batches(
  run: Callable[[int], Callable[[], None]],
  candidates: Sequence[int],
  samples: Callable[[int], int],
  *,
  rounds: int = ROUNDS,
  clock: Callable[[], float] = time.perf_counter,
) -> tuple[tuple[int, float, float, float], ...]:
  """``(batch, min, median, max samples/s)`` of each candidate: ``run(b)`` returns a call
  (compiled by its first run) that draws ``samples(b)`` samples; the candidates
  alternate within each of ``rounds`` rounds, so a change of load hits all alike."""
  calls = {b: run(b) for b in candidates}
  for call in calls.values():
    call()  # compile and warm up
  rates: dict[int, list[float]] = {b: [] for b in candidates}
  for _ in range(rounds):
    for b, call in calls.items():
      t = clock()
      call()
      rates[b].append(samples(b) / max(clock() - t, 1e-9))
  return tuple((b, min(r), statistics.median(r), max(r)) for b, r in rates.items())


def _best(rates: Sequence[tuple[int, float, float, float]]) -> int:
  """The batch of the best median; among those within 2% of it, the largest."""
  top = max(med for _, _, med, _ in rates)
  return max(b for b, _, med, _ in rates if med >= 0.98 * top)


def _probe_program(apply_fn: ApplyFn, num_classes: int, batch: int, steps: int, dtype):
  """A jitted loop of ``steps`` engine steps of ``batch`` samples of one input."""
  plan = make_chunk_plan(1, batch * steps, batch, 1)
  ids = jnp.zeros((1,), jnp.uint32)

  @jax.jit
  def run(key, params, x, sig):
    params = cast_floating(params, dtype)

    def body(t, counts):
      return counts + step_counts(
        apply_fn, params, noise_lib.GAUSSIAN, num_classes, plan, key, x, sig, ids, t, dtype
      )

    return jax.lax.fori_loop(0, steps, body, jnp.zeros((1, num_classes + 1), jnp.int32))

  return run


def _probe(apply_fn, params, input_shape, candidates, dtype) -> tuple:
  """Times the candidates (see :func:`time_batches`); rounds of about :data:`ROUND_S`."""
  x = jnp.full((1, *input_shape), 0.5, jnp.float32)
  sig = jnp.full((1,) + (1,) * len(input_shape), 0.25, jnp.float32)
  num_classes = int(jax.eval_shape(apply_fn, params, x).shape[-1])
  key = jax.random.key(0)
  # The rate of the smallest candidate sizes every candidate's timed call.
  first = _probe_program(apply_fn, num_classes, candidates[0], 2, dtype)
  jax.block_until_ready(first(key, params, x, sig))
  t = time.perf_counter()
  jax.block_until_ready(first(key, params, x, sig))
  rate = 2 * candidates[0] / max(time.perf_counter() - t, 1e-9)
  steps = {b: max(2, math.ceil(ROUND_S * rate / b)) for b in candidates}

  def run(b: int) -> Callable[[], None]:
    program = _probe_program(apply_fn, num_classes, b, steps[b], dtype)
    return lambda: jax.block_until_ready(program(key, params, x, sig))

  return time_batches(run, candidates, lambda b: b * steps[b])


def _disk_key(apply_fn, params, input_shape, dtype, device, candidates) -> str:
  """The persistent key of a probe: the model's program, shapes, precision, device, versions."""
  spec = jax.ShapeDtypeStruct((1, *input_shape), dtype or jnp.float32)
  abstract = jax.tree.map(lambda p: jax.ShapeDtypeStruct(jnp.shape(p), jnp.result_type(p)), params)
  program = str(jax.make_jaxpr(apply_fn)(abstract, spec))
  model = [program, repr(tuple(input_shape)), str(dtype)]
  machine = [device.platform, getattr(device, "device_kind", ""), str(os.cpu_count())]
  versions = [jax.__version__, _jaxlib_version(), repr(tuple(candidates))]
  parts = model + machine + versions
  return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _jaxlib_version() -> str:
  from importlib import metadata

  try:
    return metadata.version("jaxlib")
  except metadata.PackageNotFoundError:
    return ""


def _cache_path() -> str | None:
  cache = jax.config.jax_compilation_cache_dir
  return os.path.join(cache, CACHE_FILE) if cache else None


def _read_cache(key: str) -> BatchChoice | None:
  path = _cache_path()
  try:
    with open(path) as f:  # type: ignore[arg-type]
      entry = json.load(f)[key]
    rates = tuple(tuple(r) for r in entry["rates"])
    return BatchChoice(int(entry["batch"]), "cached", rates)  # type: ignore[arg-type]
  except (TypeError, OSError, ValueError, KeyError):
    return None


def _write_cache(key: str, choice: BatchChoice) -> None:
  path = _cache_path()
  if path is None:
    return
  try:
    with open(path) as f:
      table = json.load(f)
  except (OSError, ValueError):
    table = {}
  table[key] = {"batch": choice.batch, "rates": [list(r) for r in choice.rates]}
  tmp = f"{path}.{os.getpid()}.tmp"
  try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(tmp, "w") as f:
      json.dump(table, f)
    os.replace(tmp, path)
  except OSError:  # a read-only cache: the choice is still kept for the process
    pass


def choose_batch_size(
  apply_fn: ApplyFn,
  params: PyTree,
  input_shape: Sequence[int],
  *,
  num: int,
  inputs: int = 1,
  batch_size: int | str | None = None,
  compute_dtype: DTypeLike | None = None,
  device: jax.Device | None = None,
) -> BatchChoice:
  """The engine batch of a call of ``inputs`` inputs and ``num`` samples each.

  Args:
    apply_fn: ``apply_fn(params, x) -> logits`` (hashable, jit-traceable).
    params: its parameters.
    input_shape: shape of one input.
    num: samples per input of the call (the batch is evened out so that they split
      into equal steps).
    inputs: inputs of the call (with ``num``, what tells whether the probe pays).
    batch_size: an int (used as given); ``"auto"``: the largest that fits in memory
      (``auto_batch_size``); ``"timed"``: the probe's choice (probed unless known);
      None (not told): a known probe's choice, else the probe where it pays (a CPU,
      at least :data:`PAYS` samples), else the memory fit, or
      :data:`SMALL_CALL_BATCH` for a small call on inputs of up to 4,096 values.
    compute_dtype: the classifier's computation dtype (None: float32).
    device: the device (default: the first local device).

  Returns:
    A :class:`BatchChoice`.
  """
  num = check_int("num", num)
  if batch_size is not None and not isinstance(batch_size, str):
    return BatchChoice(check_int("batch_size", batch_size), "given")
  if batch_size not in (None, "auto", "timed"):
    raise ValueError(f"batch_size must be an int, 'auto' or 'timed', got {batch_size!r}")
  input_shape = tuple(int(s) for s in input_shape)
  device = jax.local_devices()[0] if device is None else device
  dtype = None if compute_dtype is None else jnp.dtype(compute_dtype)
  memo_key = (apply_fn, params_signature(params), input_shape, dtype, device)
  known = _MEMO.get(memo_key)
  if known is not None and batch_size != "auto":
    return dataclasses.replace(known, batch=even_steps(known.batch, num))
  small = inputs * num < PAYS
  if batch_size is None and small and math.prod(input_shape) <= _SMALL_INPUT:
    return BatchChoice(even_steps(SMALL_CALL_BATCH, num), "default")
  fit = auto_batch_size(apply_fn, params, input_shape, num=num, compute_dtype=dtype, device=device)
  timed = batch_size == "timed" or (batch_size is None and not small and device.platform == "cpu")
  if not timed:
    return BatchChoice(fit, "memory")
  choice = _timed_choice(apply_fn, params, input_shape, dtype, device, fit)
  _MEMO[memo_key] = dataclasses.replace(choice, how="cached")
  return dataclasses.replace(choice, batch=even_steps(choice.batch, num))


def _timed_choice(apply_fn, params, input_shape, dtype, device, fit: int) -> BatchChoice:
  """The probe's choice among the candidates up to ``fit``: read from the cache file,
  else probed (and written there)."""
  candidates = [b for b in CANDIDATES if b < fit] + [fit]
  disk_key = _disk_key(apply_fn, params, input_shape, dtype, device, candidates)
  choice = _read_cache(disk_key)
  if choice is None:
    rates = _probe(apply_fn, params, input_shape, candidates, dtype)
    choice = BatchChoice(_best(rates), "timed", rates)
    _write_cache(disk_key, choice)
  return choice
