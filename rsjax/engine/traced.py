"""The counts of the smoothed classifier as a pure JAX function, for research code.

``rsjax.certify`` and ``rsjax.predict`` are host-side drivers: they validate
inputs with NumPy, plan batches for the device memory (``rsjax.sample_counts``,
which returns NumPy counts), and compute the float64 Clopper-Pearson bounds on
the host. They cannot run under ``jax.jit``, ``jax.vmap`` or ``jax.grad``;
calling them there raises one line pointing here. Under a transformation, use :func:`counts`, which draws the same
noise (sample ``j`` of input ``ids[i]`` from ``fold_in(fold_in(key, ids[i]),
j)``, the one definition in ``rsjax.sample_noise``) and counts through the
engine's own step, so its counts equal ``rsjax.sample_counts``' exactly; then
take the counts to the host for the bounds::

  import functools, jax, jax.numpy as jnp, numpy as np, rsjax

  key = jax.random.key(0)
  k0, k1 = jax.random.fold_in(key, 0), jax.random.fold_in(key, 1)   # as rsjax.certify
  counts = jax.jit(functools.partial(rsjax.engine.traced.counts, apply_fn=apply_fn,
                                     num_classes=10, samples_per_step=100),
                   static_argnames="num")
  c0, _ = counts(k0, params, x, sigma=0.25, num=100)                # selection
  c1, bad = counts(k1, params, x, sigma=0.25, num=10_000)           # estimation
  cert = rsjax.certificate_from_counts(np.asarray(c0), np.asarray(c1), n=10_000,
                                       alpha=0.001, scale=np.full(len(x), 0.25),
                                       dim=x[0].size)                # host, float64
  # several sigmas at once: vmap over sigma (one [S, B, C] array of counts)
  per_sigma = jax.vmap(lambda s: counts(k1, params, x, sigma=s, num=10_000)[0])(
      jnp.array([0.12, 0.25, 0.5]))

These are the same counts and the same certificate as ``rsjax.certify(key,
apply_fn, params, x, sigma=0.25, num_classes=10, n0=100, n=10_000)``. Check
``bad`` (samples whose logits were not finite) is zero before trusting them:
``certify`` refuses such counts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from rsjax import noise as noise_lib
from rsjax.engine.step import ApplyFn, class_counts, noisy_logits
from rsjax.util import PyTree

__all__ = ["counts"]


def counts(
  key: jax.Array,
  params: PyTree,
  x: ArrayLike,
  *,
  apply_fn: ApplyFn,
  sigma: ArrayLike,
  num_classes: int,
  num: int,
  samples_per_step: int = 100,
  ids: ArrayLike | None = None,
  noise: noise_lib.Noise | str | None = None,
) -> tuple[jax.Array, jax.Array]:
  """Monte Carlo class counts of ``num`` noisy samples per input, in pure JAX.

  Jittable (``num``, ``samples_per_step``, ``num_classes``, ``apply_fn`` and
  ``noise`` static), vmappable (over ``x``, ``sigma``, ``params`` or ``key``)
  and differentiable nowhere useful (counts are integers). One forward pass
  sees ``B * samples_per_step`` noisy inputs; the passes run in a
  ``lax.scan``. Counts equal ``rsjax.sample_counts(key, ...)`` exactly.

  Args:
    key: a typed ``jax.random.key``.
    params: the pytree passed to ``apply_fn``.
    x: ``[B, *input_shape]`` inputs.
    apply_fn: ``apply_fn(params, x) -> logits [b, num_classes]``.
    sigma: noise scale: a scalar, ``[B]`` or ``[B, *input_shape]``.
    num_classes: C.
    num: samples per input.
    samples_per_step: samples of each input per forward pass.
    ids: ``[B]`` dataset indices (the noise of an input depends on its id;
      default ``0 .. B - 1``).
    noise: noise family or name (default Gaussian).

  Returns:
    ``(counts [B, C] int32, nonfinite [B] int32)``: the class counts, and the
    number of samples whose logits were not all finite (their class is
    meaningless; ``rsjax.certify`` refuses counts where it is nonzero).
  """
  # A family whose draws are bound to one sigma (sound 8-bit noise) binds or checks it here.
  noise = noise_lib.get_noise(noise).bind_sigma(sigma)
  x = jnp.asarray(x, jnp.float32)
  b, shape = x.shape[0], x.shape[1:]
  sig = jnp.asarray(sigma, jnp.float32)
  if sig.ndim == 0 or sig.shape == (b,):
    sig = jnp.broadcast_to(sig, (b,)).reshape((b,) + (1,) * len(shape))
  elif sig.shape != x.shape:
    raise ValueError(
      f"sigma must be a scalar, [B]={(b,)} or [B, *input_shape]={x.shape}, got shape {sig.shape}"
    )
  ids = jnp.arange(b, dtype=jnp.uint32) if ids is None else jnp.asarray(ids, jnp.uint32)
  s = int(min(samples_per_step, num))
  chunks = -(-int(num) // s)

  def body(total: jax.Array, chunk: jax.Array) -> tuple[jax.Array, None]:
    j = chunk * s + jnp.arange(s, dtype=jnp.uint32)
    logits, counted = noisy_logits(
      apply_fn, params, noise, num_classes, key, x, sig, ids, j, j < num
    )
    return total + class_counts(logits, counted, num_classes), None

  total0 = jnp.zeros((b, num_classes + 1), jnp.int32)
  total, _ = jax.lax.scan(body, total0, jnp.arange(chunks, dtype=jnp.uint32))
  return total[:, :num_classes], total[:, num_classes]
