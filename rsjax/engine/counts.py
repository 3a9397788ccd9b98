"""The counts engine: draw noise, run the base classifier, count classes (device).

One engine serves every method. Its properties:

* **Reproducible.** The noise of sample ``j`` of the input with id ``i`` is drawn
  from ``fold_in(fold_in(key, i), j)``. Counts therefore do not depend on
  ``batch_size``, on how a dataset is split into calls or ordered (pass ``ids``),
  or on the number of devices.
* **Bounded memory.** Work runs in static-size steps of ``batch_size`` forward
  passes (``inputs_per_step x samples_per_step``) inside one device-side loop
  over the steps; N noisy copies are never held. Padding is masked, never counted.
* **No host syncs while sampling.** Counts are accumulated on device; the loop
  has a static trip count (the same on every device, the overhang masked) and
  no conditional, so a GPU runs it without asking the host once per step.
* **All local devices.** The steps are spread over every local device with
  ``jax.shard_map``; each device returns its partial counts and the host adds
  them up (no collective, so devices never wait on each other). A single
  input's samples are sharded too, so one image gets faster with more devices.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from jax.typing import ArrayLike, DTypeLike

from rsjax import noise as noise_lib
from rsjax.engine import precision as precision_lib
from rsjax.engine.batch_timing import choose_batch_size
from rsjax.engine.step import (
  ApplyFn,
  ChunkPlan,
  cast_floating,
  class_counts,
  draw_step,
  drawn_logits,
  has_convolution,
  make_chunk_plan,
)
from rsjax.engine.transfer import (
  PendingCounts,
  Placement,
  check_finite_outputs,
  fold_keys,
  resolve_all,
  resolve_counts,
)
from rsjax.util import KeyLike, PyTree, as_key, check_int, local_mesh, num_local_devices, replicate

__all__ = [
  "ApplyFn",
  "PendingCounts",
  "sample_counts",
  "dispatch_counts",
  "as_key",
  "ChunkPlan",
  "Placement",
  "check_finite_outputs",
  "fold_keys",
  "make_chunk_plan",
  "prepare_inputs",
  "refuse_traced",
  "resolve_all",
  "resolve_counts",
  "run_on_devices",
]


def refuse_traced(name: str, *trees: PyTree) -> None:
  """Raises a one-line ``TypeError`` if any leaf of ``trees`` is a JAX tracer.

  Host-side drivers call it first, so that ``jax.jit(rsjax.certify)`` says
  which function to use instead of failing deep inside NumPy.
  """
  for leaf in jax.tree.leaves(trees):
    if isinstance(leaf, jax.core.Tracer):
      raise TypeError(
        f"{name} is the host-side driver (NumPy input checks, batches planned for device "
        "memory, float64 bounds on the host) and cannot run under jax.jit, jax.vmap or "
        "jax.grad; under a transformation call rsjax.engine.traced.counts (pure JAX, the same "
        "counts), then rsjax.certificate_from_counts on the host (see rsjax.engine.traced)"
      )


def run_on_devices(
  per_device: Callable[..., PyTree], mesh: jax.sharding.Mesh, *args: PyTree
) -> PyTree:
  """Runs ``per_device(*args)`` on every device of ``mesh`` (use inside ``jax.jit``).

  Every argument is replicated; ``per_device`` reads its device with
  ``jax.lax.axis_index("dev")`` and returns partial results, each with a leading
  axis of size 1. The result stacks them: leading axis = devices.
  """
  fn = jax.shard_map(
    per_device, mesh=mesh, in_specs=(P(),) * len(args), out_specs=P("dev"), check_vma=False
  )
  return fn(*args)


def prepare_inputs(
  x: ArrayLike, sigma: ArrayLike, ids: ArrayLike | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Validates ``x``, ``sigma`` and ``ids`` and brings them to engine form.

  Args:
    x: ``[B, *input_shape]`` inputs.
    sigma: float, ``[B]`` or ``[B, *input_shape]``.
    ids: ``[B]`` non-negative integer ids or None (positions in ``x``).

  Returns:
    ``(x float32 [B, *shape], sigma float32 [B, *shape or ones], ids uint32 [B])``
    as NumPy arrays.

  Raises:
    ValueError: naming the argument, for wrong shapes, NaN/inf, sigma <= 0.
  """
  if isinstance(x, jax.Array):
    x = np.asarray(jax.device_get(x))
  x = np.asarray(x)
  if x.ndim < 2:
    raise ValueError(
      f"x must have shape [B, *input_shape] (a batch of inputs), got shape {x.shape}; "
      "add a leading batch axis for a single input (x[None])"
    )
  if x.shape[0] < 1:
    raise ValueError("x must hold at least one input, got an empty batch")
  if not np.issubdtype(x.dtype, np.number):
    raise ValueError(f"x must be numeric, got dtype {x.dtype}")
  x = x.astype(np.float32)
  if not np.all(np.isfinite(x)):
    raise ValueError("x contains NaN or inf values")
  b, shape = x.shape[0], x.shape[1:]

  sig = np.asarray(jax.device_get(sigma), dtype=np.float32)
  if sig.ndim == 0:
    sig = np.full((b,) + (1,) * len(shape), sig, np.float32)
  elif sig.shape == (b,):
    sig = sig.reshape((b,) + (1,) * len(shape))
  elif sig.shape == x.shape or sig.shape == (b,) + (1,) * len(shape):
    pass
  else:
    raise ValueError(
      f"sigma must be a float, shape [B]={(b,)} or [B, *input_shape]={x.shape}, "
      f"got shape {sig.shape}"
    )
  if not np.all(np.isfinite(sig)) or np.any(sig <= 0):
    raise ValueError("sigma must be finite and > 0 everywhere")

  if ids is None:
    ids_arr = np.arange(b, dtype=np.uint32)
  else:
    ids_np = np.asarray(jax.device_get(ids))
    if ids_np.shape != (b,):
      raise ValueError(f"ids must have shape [B]={(b,)}, got {ids_np.shape}")
    if not np.issubdtype(ids_np.dtype, np.integer):
      raise ValueError(f"ids must be integers, got dtype {ids_np.dtype}")
    if np.any(ids_np < 0) or np.any(ids_np >= 2**32):
      raise ValueError("ids must lie in [0, 2**32)")
    ids_arr = ids_np.astype(np.uint32)
  return x, sig, ids_arr


@functools.partial(
  jax.jit, static_argnames=("apply_fn", "noise", "num_classes", "plan", "mesh", "compute_dtype")
)
def _counts_jit(
  key: jax.Array,
  params: PyTree,
  x_pad: jax.Array,
  sig_pad: jax.Array,
  ids_pad: jax.Array,
  *,
  apply_fn: ApplyFn,
  noise: noise_lib.Noise,
  num_classes: int,
  plan: ChunkPlan,
  mesh: jax.sharding.Mesh,
  compute_dtype: DTypeLike | None,
) -> jax.Array:
  g, chunks, steps = plan.inputs_per_step, plan.chunks, plan.steps_per_device
  params = cast_floating(params, compute_dtype)
  ahead = has_convolution(apply_fn, params, x_pad.shape[1:], compute_dtype or x_pad.dtype)

  def per_device(
    key: jax.Array, params: PyTree, x_pad: jax.Array, sig_pad: jax.Array, ids_pad: jax.Array
  ) -> jax.Array:
    # Every device runs the same static number of steps (a Python int): the
    # steps [dev * L, dev * L + L) of the pass (step = group * chunks + chunk).
    # A static trip count and no conditional let a GPU run the loop without a
    # host sync per step. The last device's overhang (step >= plan.steps) is
    # the chunk past the last group's last one: every j >= num, never counted.
    first = jax.lax.axis_index("dev").astype(jnp.int32) * steps

    def draw(t: jax.Array | int) -> tuple[jax.Array, jax.Array, jax.Array]:
      step = first + t
      group = jnp.minimum(step // chunks, plan.groups - 1)
      chunk = jnp.minimum(step - group * chunks, chunks).astype(jnp.uint32)
      x_g, s_g, i_g = (jax.lax.dynamic_slice_in_dim(a, group * g, g)
                       for a in (x_pad, sig_pad, ids_pad))  # fmt: skip
      return group * g, *draw_step(noise, plan, key, x_g, s_g, i_g, chunk)

    def add(counts: jax.Array, start: jax.Array, xn: jax.Array, ok: jax.Array) -> jax.Array:
      logits, ok = drawn_logits(apply_fn, params, num_classes, xn, ok, compute_dtype)
      c = class_counts(logits, ok, num_classes)
      c_g = jax.lax.dynamic_slice_in_dim(counts, start, g) + c
      return jax.lax.dynamic_update_slice_in_dim(counts, c_g, start, 0)

    def body(t: jax.Array, counts: jax.Array) -> jax.Array:
      return add(counts, *draw(t))

    def body_ahead(t: jax.Array, carry: tuple) -> tuple:
      # The noisy batch of step t was drawn in step t - 1 and crossed the loop
      # boundary, so it is in memory before the forward pass: left to fuse,
      # XLA:CPU folds the draw into the first convolution's input fusion and
      # recomputes the normal transform for every output channel (LeNet: 2x a
      # step with several input groups). A barrier does not hold on XLA:CPU,
      # and a conditional around the draw costs a GPU a host sync per step.
      counts, start, xn, ok = carry
      return (add(counts, start, xn, ok), *draw(t + 1))

    counts0 = jnp.zeros((plan.padded_inputs, num_classes + 1), jnp.int32)
    if not ahead:
      return jax.lax.fori_loop(0, steps, body, counts0)[None]
    carry = jax.lax.fori_loop(0, steps, body_ahead, (counts0, *draw(0)))
    return carry[0][None]

  # Each device returns its partial counts; they are summed on the host. The
  # program has no collective, so devices never wait on each other (in-process
  # CPU collectives can deadlock when devices outnumber cores).
  return run_on_devices(per_device, mesh, key, params, x_pad, sig_pad, ids_pad)


def sample_counts(
  key: KeyLike,
  apply_fn: ApplyFn,
  params: PyTree,
  x: ArrayLike,
  *,
  sigma: ArrayLike,
  num_classes: int,
  num: int,
  batch_size: int | str | None = None,
  ids: ArrayLike | None = None,
  noise: noise_lib.Noise | str | None = None,
  compute_dtype: DTypeLike | None = None,
  devices: int | None = None,
  precision: str | None = None,
) -> np.ndarray:
  """Monte Carlo class counts of the smoothed classifier.

  Args:
    key: a ``jax.random.key`` (or int seed). Sample ``j`` of input ``ids[i]``
      uses ``fold_in(fold_in(key, ids[i]), j)``.
    apply_fn: ``apply_fn(params, x) -> logits``, ``x`` of shape ``[b, *input_shape]``,
      logits ``[b, num_classes]``. Must be jit-traceable.
    params: a pytree passed to ``apply_fn``.
    x: ``[B, *input_shape]`` inputs (images in [0, 1]).
    sigma: noise scale: float, ``[B]`` or ``[B, *input_shape]`` (see ``rsjax.noise``).
    num_classes: C.
    num: samples per input.
    batch_size: forward passes per step; ``"auto"``: the largest that fits in the
      device memory (``rsjax.engine.batching.auto_batch_size``); ``"timed"``: the
      fastest of a short timed probe; None: the probe's where it pays (a large call
      on a CPU), else as before (``rsjax.engine.batch_timing.choose_batch_size``).
    ids: ``[B]`` dataset indices of the inputs (default: positions in ``x``).
    noise: noise family or its name (default Gaussian).
    compute_dtype: ``jnp.bfloat16`` is ``precision="bfloat16"`` (kept for
      older callers).
    devices: number of local devices to use (default: all).
    precision: the declared precision of the classifier (``rsjax.engine.precision``):
      ``"float32"`` (default: float32 with full-precision matmuls, on every
      backend), ``"tf32"``, or ``"bfloat16"`` (the noise is added in float32,
      then the noisy input and the floating parameters are cast to bfloat16;
      the certificate is then one of *that* reduced-precision classifier).

  Returns:
    ``[B, num_classes]`` int32 NumPy counts. Counting happens on device; each
    device's partial counts are summed on the host (no cross-device collective).

  Raises:
    FloatingPointError: ``apply_fn`` returned NaN or inf logits for some noise
      sample; the message names the input ids (no counts from a broken model).
  """
  refuse_traced("rsjax.sample_counts", key, params, x, sigma, ids)
  x, sig, ids_arr = prepare_inputs(x, sigma, ids)
  return dispatch_counts(
    as_key(key),
    apply_fn,
    params,
    x,
    sig,
    ids_arr,
    num=num,
    num_classes=num_classes,
    batch_size=batch_size,
    noise=noise,
    precision=precision_lib.resolve(precision, compute_dtype),
    devices=devices,
  ).result()


def dispatch_counts(
  key: jax.Array,
  apply_fn: ApplyFn,
  params: PyTree,
  x: np.ndarray,
  sig: np.ndarray,
  ids_arr: np.ndarray,
  *,
  num: int,
  num_classes: int,
  batch_size: int | str | None,
  noise: noise_lib.Noise | str | None = None,
  precision: str | None = None,
  devices: int | None = None,
  placement: Placement | None = None,
) -> PendingCounts:
  """Launches the counts of :func:`sample_counts` for inputs already validated by
  :func:`prepare_inputs`, without waiting for them.

  ``key`` is a typed key (:func:`as_key`); ``x``, ``sig``, ``ids_arr`` are the NumPy
  arrays :func:`prepare_inputs` returns (callers that draw several passes over the same
  inputs validate once); ``precision`` a name of ``rsjax.engine.precision`` (None: the
  default).

  One compiled program does every step of the pass (a device-side ``lax.scan``
  over all inputs and sample chunks), so a pass is one launch whatever ``num``
  and the number of inputs; its inputs are placed explicitly (``device_put``).

  ``placement``: what this call already placed (``rsjax.engine.transfer``):
  a caller that dispatches several passes over the same ``params``, ``x``,
  ``sig`` and ``ids_arr`` places them once (None: placed anew).

  Returns:
    A :class:`PendingCounts`; its ``result()`` is the ``[B, C]`` int32 NumPy counts.
  """
  precision = precision_lib.resolve(precision)
  compute_dtype = precision_lib.compute_dtype(precision)
  num = check_int("num", num)
  num_classes = check_int("num_classes", num_classes)
  if batch_size is None or isinstance(batch_size, str):  # not told, or a rule: choose
    step = choose_batch_size(
      apply_fn,
      params,
      x.shape[1:],
      num=num,
      inputs=x.shape[0],
      batch_size=batch_size,
      compute_dtype=compute_dtype,
    ).batch
  else:
    step = check_int("batch_size", batch_size)
  noise = noise_lib.get_noise(noise).bind(x, sig)
  ndev = num_local_devices(devices)
  plan = make_chunk_plan(x.shape[0], num, step, ndev)
  pad = plan.padded_inputs - x.shape[0]
  if pad:
    x = np.concatenate([x, np.zeros((pad,) + x.shape[1:], x.dtype)])
    sig = np.concatenate([sig, np.ones((pad,) + sig.shape[1:], sig.dtype)])
    ids_arr = np.concatenate([ids_arr, np.zeros((pad,), ids_arr.dtype)])
  ids_given = ids_arr[: plan.num_inputs]
  mesh = local_mesh(ndev)
  # Everything enters replicated over the mesh (a no-op for arrays already placed
  # so), whatever device the caller's key or parameters were committed to.
  if placement is None:
    key, params, x, sig, ids_arr = replicate(mesh, (key, params, x, sig, ids_arr))
  else:
    # An uncommitted key (``as_key``, ``fold_keys``) is placed by the launch
    # itself; placing it here costs more than the launch (a key's device_put).
    key = replicate(mesh, key) if key.committed else key
    params = placement.params(mesh, params)
    x, sig, ids_arr = placement.inputs(mesh, x, sig, ids_arr)
  with precision_lib.context(precision):
    partial = _counts_jit(
      key,
      params,
      x,
      sig,
      ids_arr,
      apply_fn=apply_fn,
      noise=noise,
      num_classes=num_classes,
      plan=plan,
      mesh=mesh,
      compute_dtype=compute_dtype,
    )
  return PendingCounts(partial, plan.num_inputs, ids_given, num)
