"""One step of the counts engine (device): noise, forward pass, argmax, count.

The engine (``rsjax.engine.counts``) scans this step; the memory probe
(``rsjax.engine.batching``) compiles the very same function to measure what a step
costs, so the two cannot drift apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from jax.extend import core as jax_core
from jax.typing import ArrayLike, DTypeLike

from rsjax import noise as noise_lib
from rsjax.util import PyTree

__all__ = [
  "ApplyFn",
  "ChunkPlan",
  "cast_floating",
  "make_chunk_plan",
  "class_counts",
  "drawn_logits",
  "noisy_logits",
  "sample_classes",
  "sample_noise",
  "step_counts",
]

#: ``apply_fn(params, x) -> logits``: the base classifier (jit-traceable).
ApplyFn = Callable[[PyTree, jax.Array], jax.Array]


@dataclasses.dataclass(frozen=True)
class ChunkPlan:
  """Static shape of the sampling loop.

  Attributes:
    num_inputs: B, the number of inputs.
    num: samples per input.
    samples_per_step: s, samples of one input per forward pass.
    inputs_per_step: g, inputs per forward pass (forward batch = g * s).
    chunks: ceil(num / s) steps per input.
    groups: ceil(B / g) input groups.
    devices: number of local devices the steps are spread over.
  """

  num_inputs: int
  num: int
  samples_per_step: int
  inputs_per_step: int
  chunks: int
  groups: int
  devices: int

  @property
  def steps(self) -> int:
    return self.groups * self.chunks

  @property
  def steps_per_device(self) -> int:
    return -(-self.steps // self.devices)

  @property
  def padded_inputs(self) -> int:
    return self.groups * self.inputs_per_step


def make_chunk_plan(num_inputs: int, num: int, batch_size: int, devices: int) -> ChunkPlan:
  """Chooses the step shape: ``batch_size`` forward passes per step.

  When ``num < batch_size`` (e.g. the n0 selection pass) several inputs share a
  step, so small models still see large forward batches.
  """
  s = min(int(batch_size), int(num))
  g = max(1, min(int(batch_size) // s, int(num_inputs)))
  return ChunkPlan(
    num_inputs=int(num_inputs),
    num=int(num),
    samples_per_step=s,
    inputs_per_step=g,
    chunks=-(-int(num) // s),
    groups=-(-int(num_inputs) // g),
    devices=int(devices),
  )


def sample_noise(
  noise: noise_lib.Noise, key: jax.Array, input_id: ArrayLike, j: ArrayLike, shape: Sequence[int]
) -> jax.Array:
  """Unit noise of samples ``j`` of the input with id ``input_id``: ``[len(j), *shape]``.

  Sample ``j`` is drawn from ``fold_in(fold_in(key, input_id), j)``. This is the
  one definition of rsjax's reproducible noise; every sampler (the engine, SRS
  chains, the memory probe) draws through it.
  """
  k_i = jax.random.fold_in(key, input_id)
  keys = jax.vmap(lambda jj: jax.random.fold_in(k_i, jj))(jnp.asarray(j, jnp.uint32))
  return jax.vmap(lambda k: noise.sample(k, tuple(shape), jnp.float32))(keys)


def cast_floating(params: PyTree, dtype: DTypeLike | None) -> PyTree:
  """``params`` with every floating array cast to ``dtype`` (None: unchanged)."""

  def cast(p: PyTree) -> PyTree:
    floating = isinstance(p, jax.Array) and jnp.issubdtype(p.dtype, jnp.floating)
    return p.astype(dtype) if floating else p

  return params if dtype is None else jax.tree.map(cast, params)


def _draw(
  noise: noise_lib.Noise,
  key: jax.Array,
  x_g: jax.Array,
  sig_g: jax.Array,
  ids_g: jax.Array,
  j: jax.Array,
) -> tuple[jax.Array, jax.Array]:
  """The noisy batch ``[g * s, *shape]`` of samples ``j`` (``[s]``) of ``g`` inputs and its
  valid draws ``[g, s]`` bool (all true but for the sound 8-bit noise's rare invalid draws)."""
  g, s, shape = x_g.shape[0], j.shape[0], x_g.shape[1:]
  eps = jax.vmap(lambda i: sample_noise(noise, key, i, j, shape))(ids_g)  # [g, s, *shape]
  if noise.lattice:  # integer grid offsets: the image stays integer through the add
    xn, ok = noise.noisy(x_g[:, None], eps)  # type: ignore[attr-defined]
    return xn.reshape((-1,) + shape), ok
  return (x_g[:, None] + sig_g[:, None] * eps).reshape((g * s,) + shape), jnp.ones((g, s), bool)


def drawn_logits(
  apply_fn: ApplyFn,
  params: PyTree,
  num_classes: int,
  xn: jax.Array,
  counted: jax.Array,
  compute_dtype: DTypeLike | None,
) -> tuple[jax.Array, jax.Array]:
  """The logits ``[g * s, C]`` of a drawn noisy batch ``xn`` ``[g * s, *shape]``
  (:func:`draw_step`'s), and ``counted`` ``[g, s]`` (which samples count) back: the input
  of :func:`class_counts`."""
  g, s = counted.shape
  shape = xn.shape[1:]
  if compute_dtype is not None:
    xn = xn.astype(compute_dtype)
  try:
    logits = apply_fn(params, xn)
  except (TypeError, ValueError) as e:
    raise ValueError(
      f"apply_fn failed on inputs of shape {tuple(shape)} (x must be [B, *input_shape]; for a "
      f"single input add a batch axis, x[None]): {type(e).__name__}: "
      f"{(str(e).splitlines() or [''])[0]}"
    ) from e
  if logits.ndim != 2 or logits.shape != (g * s, num_classes):
    raise ValueError(
      f"apply_fn returned logits of shape {logits.shape} for a batch of {g * s} inputs; "
      f"expected [{g * s}, num_classes={num_classes}]"
    )
  return logits, counted


def noisy_logits(
  apply_fn: ApplyFn,
  params: PyTree,
  noise: noise_lib.Noise,
  num_classes: int,
  key: jax.Array,
  x_g: jax.Array,
  sig_g: jax.Array,
  ids_g: jax.Array,
  j: jax.Array,
  valid: jax.Array,
  compute_dtype: DTypeLike | None = None,
) -> tuple[jax.Array, jax.Array]:
  """The logits of samples ``j`` of ``g`` inputs and which of them count (traceable).

  Draws the noise of samples ``j`` (``[s]`` uint32, the same indices for every
  input) with :func:`sample_noise` and runs ``apply_fn`` on the ``g * s`` noisy
  inputs in one forward batch. Every sampler of the engine (the planned passes
  of ``rsjax.engine.counts``, the rounds of ``rsjax.engine.rounds``, the traced
  counts of ``rsjax.engine.traced``) draws and classifies through this function,
  then reduces its output with :func:`class_counts` or :func:`sample_classes`.

  Args:
    apply_fn: the base classifier ``apply_fn(params, x) -> logits``.
    params: its parameters.
    noise: the bound noise family.
    num_classes: C.
    key: the noise key of the run's stream.
    x_g: ``[g, *shape]`` inputs.
    sig_g: their noise scales (``[g]`` or ``[g, *shape]``).
    ids_g: ``[g]`` uint32 dataset indices (sample ``j`` of input ``ids_g[i]`` uses
      ``fold_in(fold_in(key, ids_g[i]), j)``).
    j: ``[s]`` uint32 sample indices.
    valid: ``[s]`` bool, the samples that exist.
    compute_dtype: the classifier's computation dtype, or None.

  Returns:
    ``(logits [g * s, C], counted [g, s] bool)``: ``counted`` is ``valid`` and a
    valid draw (the sound 8-bit noise's rare invalid draws count for no class).
  """
  g, s, shape = x_g.shape[0], j.shape[0], x_g.shape[1:]

  def draw() -> tuple[jax.Array, jax.Array]:
    return _draw(noise, key, x_g, sig_g, ids_g, j)

  if has_convolution(apply_fn, params, shape, compute_dtype or x_g.dtype):
    # The noisy batch is drawn in a conditional (no valid sample: no draw), so
    # it is written to memory before the forward pass. Left to fuse, XLA:CPU
    # folds the draw into the first convolution's input fusion and recomputes
    # the normal transform for every output channel (LeNet: 20% of a step).
    # The planned passes (rsjax.engine.counts) draw a step ahead instead: no
    # conditional, which costs a GPU a host sync per step.
    dtype = jnp.float32 if noise.lattice else x_g.dtype
    zeros = (jnp.zeros((g * s,) + shape, dtype), jnp.zeros((g, s), bool))
    xn, drawn_ok = jax.lax.cond(jnp.any(valid), draw, lambda: zeros)
  else:
    xn, drawn_ok = draw()
  # A sample with an invalid draw (sound 8-bit noise) counts against every class.
  counted = valid[None, :] & drawn_ok
  return drawn_logits(apply_fn, params, num_classes, xn, counted, compute_dtype)


def _predictions(
  logits: jax.Array, g: int, s: int, valid: jax.Array
) -> tuple[jax.Array, jax.Array]:
  """``(argmax classes [g, s], non-finite logits where valid [g, s])`` of a step's logits."""
  pred = jnp.argmax(logits, axis=-1).reshape(g, s)
  bad = ~jnp.all(jnp.isfinite(logits), axis=-1).reshape(g, s) & valid
  return pred, bad


def sample_classes(logits: jax.Array, counted: jax.Array, valid: jax.Array) -> jax.Array:
  """The class of each sample: ``[g, s]`` int32 of :func:`noisy_logits`'s ``logits
  [g * s, C]`` and ``counted [g, s]`` (its ``valid [s]``).

  Their histogram is :func:`class_counts`; -1 where the logits are not all
  finite, -2 where ``valid`` does not hold (not a sample), -3 for an invalid
  draw of the sound 8-bit noise (a sample that counts for no class).
  """
  g, s = counted.shape
  pred, bad = _predictions(logits, g, s, counted)
  out = jnp.where(counted, jnp.where(bad, -1, pred), -3)
  return jnp.where(valid[None, :], out, -2).astype(jnp.int32)


def class_counts(logits: jax.Array, counted: jax.Array, num_classes: int) -> jax.Array:
  """Class counts ``[g, C + 1]`` int32 of logits ``[g * s, C]`` where ``counted [g, s]`` holds.

  Column ``C`` counts the samples whose logits are not all finite (their argmax
  is meaningless; the host refuses to use counts where it is nonzero,
  ``rsjax.engine.counts.check_finite_outputs``).
  """
  g, s = counted.shape
  pred, bad = _predictions(logits, g, s, counted)
  onehot = (pred[..., None] == jnp.arange(num_classes)) & counted[..., None]
  return jnp.concatenate(
    [jnp.sum(onehot, axis=1, dtype=jnp.int32), jnp.sum(bad, axis=1, dtype=jnp.int32)[:, None]],
    axis=1,
  )


def has_convolution(
  apply_fn: ApplyFn, params: PyTree, shape: Sequence[int], dtype: DTypeLike
) -> bool:
  """Whether ``apply_fn`` on one ``shape`` input of ``dtype`` runs a convolution (at any depth)."""
  spec = jax.ShapeDtypeStruct((1,) + tuple(shape), dtype)
  abstract = jax.tree.map(lambda p: jax.ShapeDtypeStruct(jnp.shape(p), jnp.result_type(p)), params)
  try:
    closed = jax.make_jaxpr(apply_fn)(abstract, spec)
  except Exception:  # noqa: BLE001 - the forward pass reports its own errors below
    return False

  def walk(jaxpr: jax_core.Jaxpr) -> bool:
    for eqn in jaxpr.eqns:
      if eqn.primitive.name == "conv_general_dilated":
        return True
      for sub in jax_core.jaxprs_in_params(eqn.params):
        if walk(sub):
          return True
    return False

  return walk(closed.jaxpr)


def step_samples(plan: ChunkPlan, chunk: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Sample indices ``j`` ``[s]`` uint32 of a planned step's ``chunk``, and ``j < num`` ``[s]``."""
  j = chunk * plan.samples_per_step + jnp.arange(plan.samples_per_step, dtype=jnp.uint32)
  return j, j < plan.num


def draw_step(
  noise: noise_lib.Noise,
  plan: ChunkPlan,
  key: jax.Array,
  x_g: jax.Array,
  sig_g: jax.Array,
  ids_g: jax.Array,
  chunk: jax.Array,
) -> tuple[jax.Array, jax.Array]:
  """The noisy batch ``[g * s, *shape]`` of one planned step and which samples count ``[g, s]``
  (the sample exists, ``j < num``, and its draw is valid)."""
  j, valid = step_samples(plan, chunk)
  xn, drawn_ok = _draw(noise, key, x_g, sig_g, ids_g, j)
  return xn, valid[None, :] & drawn_ok


def step_counts(
  apply_fn: ApplyFn,
  params: PyTree,
  noise: noise_lib.Noise,
  num_classes: int,
  plan: ChunkPlan,
  key: jax.Array,
  x_g: jax.Array,
  sig_g: jax.Array,
  ids_g: jax.Array,
  chunk: jax.Array,
  compute_dtype: DTypeLike | None,
) -> jax.Array:
  """Counts of one planned step: ``g`` inputs x ``s`` samples -> ``[g, C + 1]`` int32."""
  xn, counted = draw_step(noise, plan, key, x_g, sig_g, ids_g, chunk)
  logits, counted = drawn_logits(apply_fn, params, num_classes, xn, counted, compute_dtype)
  return class_counts(logits, counted, num_classes)
