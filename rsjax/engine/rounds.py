"""Budgeted CERTIFY's estimation on device: rounds of work items over the inputs still running.

``rsjax.engine.budget`` looks at each input's samples only at fixed looks and
stops an input once its grid radius is decided (its host-side stopping rule,
``sequential_bounds``). The samples of one look for the inputs still running
are one round here: a list of ``(input, sample range)`` work items spread over
the local devices and launched in a few fixed-size scans, so the device stays
busy and wall time falls with the samples used. Sample ``j`` of input ``i`` is
drawn from ``fold_in(fold_in(k_est, ids[i]), j)`` through the engine's own step
(``rsjax.engine.step.noisy_logits``), so a later round continues the same
stream and the counts at ``n_k`` equal ``rsjax.sample_counts(k_est, ...,
num=n_k)``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from jax.typing import DTypeLike

from rsjax import noise as noise_lib
from rsjax.engine.counts import check_finite_outputs
from rsjax.engine.driver import EngineCounts, Sampling
from rsjax.engine.step import ApplyFn, cast_floating, class_counts, noisy_logits, sample_classes
from rsjax.util import PyTree, local_mesh, num_local_devices, replicate

__all__ = ["CountFn", "SampleFn", "class_dtype", "round_counter", "round_sampler"]

#: ``count_fn(active [m] int, start, stop) -> [m]`` successes (:func:`round_counter`).
CountFn = Callable[[np.ndarray, int, int], np.ndarray]
#: ``sample_fn(active [m] int, start, stop) -> [m, stop - start]`` classes (:func:`round_sampler`).
SampleFn = Callable[[np.ndarray, int, int], np.ndarray]


@functools.partial(
  jax.jit,
  static_argnames=(
    "apply_fn", "noise", "num_classes", "samples_per_step", "mesh", "compute_dtype", "classes"
  ),
)  # fmt: skip
def _items_jit(
  key: jax.Array,
  params: PyTree,
  x: jax.Array,
  sig: jax.Array,
  ids: jax.Array,
  items: jax.Array,
  *,
  apply_fn: ApplyFn,
  noise: noise_lib.Noise,
  num_classes: int,
  samples_per_step: int,
  mesh: jax.sharding.Mesh,
  compute_dtype: DTypeLike | None,
  classes: bool,
) -> jax.Array:
  """The samples of a list of work items ``[devices, T, 3]`` uint32 ``(input, first, end)``.

  Item ``(i, a, b)`` draws samples ``a .. min(a + s, b) - 1`` of input ``i``
  (``s = samples_per_step``); padding items have ``a == b``. Each device scans
  its row of items and returns, with ``classes`` False, partial counts
  ``[B, C + 1]`` (column ``C``: samples with non-finite logits, as in the
  engine); with ``classes`` True, the class of every sample ``[T, s]`` (-1:
  non-finite logits, -2: past the item's end) in the narrowest of int8 / int16
  / int32 that holds every class (:func:`class_dtype`), the device-to-host
  transfer of a round. The results stack on a leading device axis.
  """
  params = cast_floating(params, compute_dtype)
  out_dtype = class_dtype(num_classes)

  def per_device(
    key: jax.Array, params: PyTree, x: jax.Array, sig: jax.Array, ids: jax.Array, items: jax.Array
  ) -> jax.Array:
    def body(counts: jax.Array | None, item: jax.Array) -> tuple[jax.Array | None, Any]:
      i, x_i, sig_i, ids_i, j, valid = _item_samples(item, samples_per_step, x, sig, ids)
      logits, counted = noisy_logits(
        apply_fn, params, noise, num_classes, key, x_i, sig_i, ids_i, j, valid, compute_dtype
      )
      if counts is None:
        return None, sample_classes(logits, counted, valid)[0].astype(out_dtype)
      return counts.at[i].add(class_counts(logits, counted, num_classes)[0]), None

    counts0 = None if classes else jnp.zeros((x.shape[0], num_classes + 1), jnp.int32)
    counts, preds = jax.lax.scan(body, counts0, items[0])
    return preds[None] if counts is None else counts[None]

  # Each device scans its row of the work items; the rest is replicated.
  specs = (P(),) * 5 + (P("dev"),)
  fn = jax.shard_map(per_device, mesh=mesh, in_specs=specs, out_specs=P("dev"), check_vma=False)
  return fn(key, params, x, sig, ids, items)


def _item_samples(
  item: jax.Array, samples_per_step: int, x: jax.Array, sig: jax.Array, ids: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
  """What a work item ``(i, a, b)`` samples: ``(i, x [1, ...], sig [1, ...], ids [1], j [s],
  valid [s])``, input ``i`` as a batch of one, its sample indices ``j = a .. a + s - 1``
  (``s = samples_per_step``) and ``j < b``, the ones the item holds."""
  i, a, b = item[0], item[1], item[2]
  j = a + jnp.arange(samples_per_step, dtype=jnp.uint32)

  def take(arr: jax.Array) -> jax.Array:
    return jax.lax.dynamic_index_in_dim(arr, i, keepdims=True)

  return i, take(x), take(sig), take(ids), j, j < b


def _round_items(active: np.ndarray, start: int, stop: int, s: int) -> np.ndarray:
  """Work items ``[m * chunks, 3]`` covering samples ``start .. stop - 1`` of each active input."""
  firsts = np.arange(start, stop, s, dtype=np.int64)
  inp = np.repeat(active, len(firsts))
  a = np.tile(firsts, len(active))
  return np.stack([inp, a, np.minimum(a + s, stop)], axis=1).astype(np.uint32)


def _launches(
  items: np.ndarray, ndev: int, max_steps_per_launch: int
) -> Iterator[tuple[int, np.ndarray]]:
  """``(real items, launch [ndev, t, 3])`` of a round's work items, in order.

  Each launch is the largest size (a power of 4, at most ``max_steps_per_launch``
  steps per device) that the remaining items fill: few programs, and padding only
  in the last launch of a round (fewer than ``ndev`` items; padding items
  ``(0, 0, 0)`` draw nothing). Items go round-robin over devices, so a short
  launch still spreads over all of them.
  """
  while len(items):
    per_dev = -(-len(items) // ndev)
    t = min(max_steps_per_launch, 4 ** int(math.log(per_dev, 4) + 1e-9))
    launch, items = items[: t * ndev], items[t * ndev :]
    real = len(launch)
    if real < t * ndev:
      launch = np.concatenate([launch, np.zeros((t * ndev - real, 3), np.uint32)])
    yield real, launch.reshape(t, ndev, 3).transpose(1, 0, 2)


def _samples_per_step(settings: Sampling) -> int:
  """The samples of one work item: the batch size, at most ``n``."""
  return min(settings.fixed_batch("budgeted CERTIFY"), settings.n)


def _round_launcher(
  k_est: jax.Array,
  source: EngineCounts,
  settings: Sampling,
  max_steps_per_launch: int,
  *,
  classes: bool,
) -> Callable[[np.ndarray, int, int], list[tuple[int, jax.Array]]]:
  """``launch_round(active [m], start, stop) -> [(real items, result)]``: the launches of
  :func:`_items_jit` (``classes`` as there) that draw samples ``start .. stop - 1`` of the
  inputs ``active`` from ``k_est``, dispatched without waiting for their results."""
  noise = settings.noise.bind(source.x, source.sigma)
  ndev = num_local_devices(settings.devices)
  mesh = local_mesh(ndev)
  s = _samples_per_step(settings)
  dev_args = replicate(mesh, (k_est, source.params, source.x, source.sigma, source.ids))
  static = dict(
    apply_fn=source.apply_fn, noise=noise, num_classes=source.num_classes, samples_per_step=s,
    mesh=mesh, compute_dtype=settings.compute_dtype, classes=classes,
  )  # fmt: skip

  def launch_round(active: np.ndarray, start: int, stop: int) -> list[tuple[int, jax.Array]]:
    items = _round_items(active, start, stop, s)
    launches = _launches(items, ndev, max_steps_per_launch)
    return [(real, _items_jit(*dev_args, launch, **static)) for real, launch in launches]

  return launch_round


def round_counter(
  k_est: jax.Array,
  source: EngineCounts,
  guess: np.ndarray,
  settings: Sampling,
  *,
  max_steps_per_launch: int = 64,
) -> tuple[CountFn, np.ndarray]:
  """The counts of the estimation rounds: ``(count_fn, counts [B, C] int64)``.

  ``count_fn(active [m], start, stop)`` draws samples ``start .. stop - 1`` of
  the inputs ``active`` (positions in ``source.x``) from ``k_est``, adds their
  class counts to ``counts`` and returns the counts of each input's ``guess``
  class among them ``[m]``: the source of successes of
  ``rsjax.engine.budget.sequential_bounds``. A round is a list of work items
  launched in scans whose length is a power of 4 up to
  ``max_steps_per_launch`` steps per device (a run compiles a handful of
  programs), with one host sync per round.

  Raises:
    FloatingPointError: some sample's logits were NaN or inf (when ``count_fn``
      is called).
  """
  launch_round = _round_launcher(k_est, source, settings, max_steps_per_launch, classes=False)
  counts = np.zeros((source.x.shape[0], source.num_classes), np.int64)

  def count_fn(active: np.ndarray, start: int, stop: int) -> np.ndarray:
    partials = [p for _, p in launch_round(active, start, stop)]
    # One host sync per round: the launches were dispatched asynchronously.
    new = np.sum([np.asarray(jax.device_get(p), np.int64).sum(axis=0) for p in partials], axis=0)
    check_finite_outputs(new[active, -1], source.ids[active], stop - start)
    counts[active] += new[active, :-1]
    return new[active, guess[active]]

  return count_fn, counts


def class_dtype(num_classes: int) -> np.dtype:
  """The narrowest signed integer type of the classes ``0 .. num_classes - 1`` and the
  negative markers (-1, -2, -3) of :func:`rsjax.engine.step.sample_classes`."""
  for dt in (np.int8, np.int16):
    if num_classes <= np.iinfo(dt).max:
      return np.dtype(dt)
  return np.dtype(np.int32)


def round_sampler(
  k_est: jax.Array,
  source: EngineCounts,
  settings: Sampling,
  *,
  max_steps_per_launch: int = 64,
) -> SampleFn:
  """The class of every sample of the estimation rounds, per input: ``sample_fn``.

  ``sample_fn(active [m], start, stop)`` draws samples ``start .. stop - 1`` of
  the inputs ``active`` from ``k_est`` (the stream of :func:`round_counter`)
  and returns their classes ``[m, stop - start]`` (:func:`class_dtype`), so that the host can
  look at every count in between (``rsjax.engine.anytime``). Launched as
  :func:`round_counter`'s rounds, one host sync per round; the host receives
  ``stop - start`` integers per input instead of ``C``.

  Raises:
    FloatingPointError: some sample's logits were NaN or inf (when ``sample_fn``
      is called).
  """
  s = _samples_per_step(settings)
  launch_round = _round_launcher(k_est, source, settings, max_steps_per_launch, classes=True)

  def sample_fn(active: np.ndarray, start: int, stop: int) -> np.ndarray:
    outs = launch_round(active, start, stop)
    total = sum(real for real, _ in outs)
    per_input = total // max(len(active), 1)
    # One host sync per round; back to the items' order (launches were round-robin).
    preds = np.concatenate(
      [np.asarray(jax.device_get(p)).transpose(1, 0, 2).reshape(-1, s)[:n] for n, p in outs]
    )[:total]
    preds = preds.reshape(len(active), per_input * s)
    preds = preds[:, : stop - start] if per_input * s >= stop - start else preds
    check_finite_outputs((preds == -1).sum(axis=1), source.ids[active], stop - start)
    return preds

  return sample_fn
