"""Automatic step size for the counts engine: forward passes per step from device memory.

``auto_batch_size`` compiles the engine's own step (``rsjax.engine.step.step_counts``:
noise, forward, argmax, count) at a small probe batch for abstract inputs
(nothing is allocated or run), reads the compiled program's
``memory_analysis()`` to get the bytes each sample needs, and fits as many samples as a fraction of the device memory allows:

* GPU/TPU: ``device.memory_stats()["bytes_limit"]`` minus what is in use, times
  ``memory_fraction``; at most ``accelerator_cap`` (16384).
* CPU (no ``memory_stats``): a fixed budget (``cpu_budget_bytes``, 256 MiB) and
  a cap set by the input size: 1024 for MNIST-sized inputs (up to 1024 values),
  512 up to CIFAR size (4096 values), 256 above. Larger forward batches do not
  run faster on a CPU once a step no longer fits in the caches (measured: an
  MLP on MNIST ran at 77k samples/s with steps of 1000 and 47k with 4000).

The step is then evened out so that the samples of one input split into equal
steps (``ceil(num / chunks)``, rounded up to a multiple of 8), which keeps the
masked padding small. Counts do not depend on the step size (see
``rsjax.engine.counts``), so this choice changes speed and memory, never results.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from rsjax import noise as noise_lib
from rsjax.engine.step import ApplyFn, cast_floating, make_chunk_plan, step_counts
from rsjax.util import PyTree, check_int

__all__ = ["auto_batch_size", "even_steps", "params_signature", "StepProbe", "probe_step"]

_PROBE_BATCH = 16
_ACCELERATOR_CAP = 16384
_CPU_BUDGET = 256 * 2**20


@dataclasses.dataclass(frozen=True)
class StepProbe:
  """What one compiled engine step costs, per forward pass.

  Attributes:
    batch: the probe batch the step was compiled for.
    bytes_per_sample: temporary + input bytes of the step divided by ``batch``
      (an over-estimate: fixed buffers are charged to the samples too).
    param_bytes: bytes of the parameters (from their shapes and dtypes).
    flops_per_sample: XLA's ``cost_analysis()`` FLOPs of the step divided by
      ``batch`` (0 when the backend does not report them).
  """

  batch: int
  bytes_per_sample: float
  param_bytes: int
  flops_per_sample: float


#: ``((shape, dtype), ...)`` of the leaves of a pytree of parameters. The dtype
#: objects themselves (hashable, compared by value): ``str(dtype)`` costs a few
#: microseconds a leaf, milliseconds per pass for a ResNet-110.
_LeafSignature = tuple[tuple[tuple[int, ...], Any], ...]


def params_signature(params: PyTree) -> tuple[jax.tree_util.PyTreeDef, _LeafSignature]:
  """``(treedef, ((shape, dtype), ...))`` of ``params``: what a compiled step depends on."""
  leaves, treedef = jax.tree.flatten(params)
  sig = tuple(
    (tuple(a.shape), a.dtype) if hasattr(a, "dtype") else (tuple(jnp.shape(a)), jnp.result_type(a))
    for a in leaves
  )
  return treedef, sig


@functools.lru_cache(maxsize=32)
def _probe_cached(
  apply_fn: ApplyFn,
  treedef: jax.tree_util.PyTreeDef,
  leaf_sig: _LeafSignature,
  input_shape: tuple[int, ...],
  batch: int,
  compute_dtype: jnp.dtype | None,
  device: jax.Device,
) -> StepProbe:
  abstract_params = jax.tree.unflatten(
    treedef, [jax.ShapeDtypeStruct(s, jnp.dtype(d)) for s, d in leaf_sig]
  )

  # The engine's own step (``rsjax.engine.step.step_counts``) for one input and
  # ``batch`` samples: what is measured is what the engine runs.
  x_spec = jax.ShapeDtypeStruct((1,) + input_shape, jnp.float32)
  num_classes = int(jax.eval_shape(apply_fn, abstract_params, x_spec).shape[-1])
  plan = make_chunk_plan(1, batch, batch, 1)

  def step(key: jax.Array, params: PyTree, x: jax.Array, sigma: jax.Array) -> jax.Array:
    params = cast_floating(params, compute_dtype)
    return step_counts(
      apply_fn,
      params,
      noise_lib.GAUSSIAN,
      num_classes,
      plan,
      key,
      x,
      sigma,
      jnp.zeros((1,), jnp.uint32),
      jnp.uint32(0),
      compute_dtype,
    )

  key_spec = jax.eval_shape(lambda: jax.random.key(0))
  sharding = jax.sharding.SingleDeviceSharding(device)
  lowered = jax.jit(step, in_shardings=sharding, out_shardings=sharding).lower(
    key_spec,
    abstract_params,
    x_spec,
    jax.ShapeDtypeStruct((1,) + (1,) * len(input_shape), jnp.float32),
  )
  compiled = lowered.compile()
  mem = compiled.memory_analysis()
  x_bytes = batch * math.prod(input_shape) * 4
  temp = 0 if mem is None else int(getattr(mem, "temp_size_in_bytes", 0))
  # Each sample is charged its noisy copy on top of the step's temporaries.
  param_bytes = sum(math.prod(s) * jnp.dtype(d).itemsize for s, d in leaf_sig)
  per_sample = (temp + x_bytes) / batch
  try:
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
      cost = cost[0] if cost else {}
    flops = float((cost or {}).get("flops", 0.0)) / batch
  except Exception:  # noqa: BLE001 - cost analysis is optional on some backends
    flops = 0.0
  return StepProbe(
    batch=batch, bytes_per_sample=float(per_sample), param_bytes=param_bytes, flops_per_sample=flops
  )


def probe_step(
  apply_fn: ApplyFn,
  params: PyTree,
  input_shape: Sequence[int],
  *,
  batch: int = _PROBE_BATCH,
  compute_dtype: DTypeLike | None = None,
  device: jax.Device | None = None,
) -> StepProbe:
  """Compiles one engine step at ``batch`` for abstract inputs and reports its cost.

  Nothing is allocated or executed; the result is cached per (``apply_fn``,
  parameter shapes, ``input_shape``, ``batch``, ``compute_dtype``, device).

  Args:
    apply_fn: ``apply_fn(params, x) -> logits``, hashable (as for ``sample_counts``).
    params: parameters (arrays or ``jax.ShapeDtypeStruct`` leaves).
    input_shape: shape of one input.
    batch: probe batch.
    compute_dtype: optional reduced precision (as in ``sample_counts``).
    device: the device to compile for (default: the first local device).

  Returns:
    A ``StepProbe``.
  """
  batch = check_int("batch", batch)
  input_shape = tuple(int(s) for s in input_shape)
  device = jax.local_devices()[0] if device is None else device
  treedef, leaf_sig = params_signature(params)
  dtype = None if compute_dtype is None else jnp.dtype(compute_dtype)
  return _probe_cached(apply_fn, treedef, leaf_sig, input_shape, int(batch), dtype, device)


def _cpu_cap(input_size: int) -> int:
  if input_size <= 1024:
    return 1024
  if input_size <= 4096:
    return 512
  return 256


def even_steps(batch: int, num: int) -> int:
  """The smallest step (multiple of 8) that covers ``num`` in as many steps as ``batch``."""
  if num <= batch:
    return batch
  chunks = -(-num // batch)
  even = -(-num // chunks)
  return min(batch, -(-even // 8) * 8)


def auto_batch_size(
  apply_fn: ApplyFn,
  params: PyTree,
  input_shape: Sequence[int],
  *,
  num: int,
  compute_dtype: DTypeLike | None = None,
  device: jax.Device | None = None,
  memory_fraction: float = 0.5,
  cpu_budget_bytes: int = _CPU_BUDGET,
  accelerator_cap: int = _ACCELERATOR_CAP,
  probe_batch: int = _PROBE_BATCH,
) -> int:
  """Forward passes per engine step that fit in the device memory.

  Args:
    apply_fn: ``apply_fn(params, x) -> logits`` (hashable, jit-traceable).
    params: parameters of ``apply_fn`` (arrays or ``jax.ShapeDtypeStruct``).
    input_shape: shape of one input, e.g. ``(32, 32, 3)``.
    num: samples per input of the call the step is for (the step is evened out
      so that ``num`` splits into equal steps).
    compute_dtype: optional reduced precision (as in ``sample_counts``).
    device: device whose memory bounds the step (default: first local device).
    memory_fraction: share of the free accelerator memory one step may use.
    cpu_budget_bytes: bytes one step may use on a CPU (no ``memory_stats``).
    accelerator_cap: largest step on an accelerator.
    probe_batch: batch of the compiled probe step.

  Returns:
    The step size, an int >= 1.

  Raises:
    ValueError: for a bad ``num``, ``memory_fraction`` or ``cpu_budget_bytes``.
  """
  num = check_int("num", num)
  if not 0.0 < float(memory_fraction) <= 1.0:
    raise ValueError(f"memory_fraction must lie in (0, 1], got {memory_fraction!r}")
  if int(cpu_budget_bytes) < 1:
    raise ValueError(f"cpu_budget_bytes must be >= 1, got {cpu_budget_bytes!r}")
  input_shape = tuple(int(s) for s in input_shape)
  device = jax.local_devices()[0] if device is None else device
  probe = probe_step(
    apply_fn, params, input_shape, batch=probe_batch, compute_dtype=compute_dtype, device=device
  )
  try:
    stats = device.memory_stats()
  except Exception:  # noqa: BLE001 - not every backend implements memory_stats
    stats = None
  batch = _batch_from_budget(
    probe,
    stats,
    math.prod(input_shape),
    memory_fraction=float(memory_fraction),
    cpu_budget_bytes=int(cpu_budget_bytes),
    accelerator_cap=int(accelerator_cap),
  )
  return even_steps(batch, num)


def _batch_from_budget(
  probe: StepProbe,
  stats: Mapping[str, int] | None,
  input_size: int,
  *,
  memory_fraction: float,
  cpu_budget_bytes: int,
  accelerator_cap: int,
) -> int:
  """Samples per step that fit: accelerator memory (``stats``) or the CPU budget."""
  if stats and stats.get("bytes_limit"):
    free = int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    budget = memory_fraction * free - probe.param_bytes
    cap = accelerator_cap
  else:
    budget = float(cpu_budget_bytes)
    cap = _cpu_cap(input_size)
  per_sample = max(probe.bytes_per_sample, 1.0)
  batch = int(max(1, min(cap, budget // per_sample)))
  if batch >= 64:
    batch = batch // 8 * 8
  return batch
