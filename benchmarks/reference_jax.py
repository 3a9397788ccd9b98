"""Cohen et al.'s ``core.py`` in plain JAX: the per-image loop rsjax is compared against.

``locuslab/smoothing``, ``code/core.py`` certifies one image at a time. For each
image it draws ``n0`` and then ``n`` noisy copies in batches of ``batch_size``:
each batch is the image repeated, plus ``randn * sigma``, run through the base
classifier, ``argmax``-ed and copied to the host, where the predictions are
counted. This module is that loop with the forward pass of an rsjax model
(``apply_fn``, the same weights), written the plain way:

* one jitted function per batch shape (noise drawn on the device with
  ``jax.random.normal`` from ``fold_in(key, batch index)``, forward, argmax);
* a host loop over ``ceil(num / batch_size)`` batches (the last one shorter, as
  in the reference), each prediction vector brought to the host and counted
  with ``np.bincount`` (faster than the reference's Python loop, so the
  comparison errs in the reference's favour);
* ``certify``: the class from the ``n0`` counts, the one-sided Clopper-Pearson
  lower bound on its probability from the ``n`` counts, radius
  ``sigma * Phi^-1(pA)`` or an abstention.

Its noise is not rsjax's (counts are not expected to match rsjax's); it is a
speed baseline only, used by ``benchmarks.per_image``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

__all__ = ["ReferenceLoop"]


class ReferenceLoop:
  """Cohen et al.'s per-image sampling loop over one rsjax forward pass.

  Args:
    apply_fn: ``apply_fn(params, x [b, *shape]) -> logits [b, C]``.
    params: its parameters.
    num_classes: C.
    sigma: Gaussian noise scale.
    batch_size: forward batch of one step.
  """

  def __init__(self, apply_fn, params, *, num_classes: int, sigma: float, batch_size: int):
    self.params, self.num_classes = params, int(num_classes)
    self.sigma, self.batch_size = float(sigma), int(batch_size)

    @functools.partial(jax.jit, static_argnames=("b",))
    def predict(params, x, key, i, *, b):
      noise = jax.random.normal(jax.random.fold_in(key, i), (b,) + x.shape, jnp.float32)
      return jnp.argmax(apply_fn(params, x[None] + noise * self.sigma), axis=-1)

    self._predict = predict

  def sample_noise(self, key, x: np.ndarray, num: int) -> np.ndarray:
    """Class counts ``[C]`` of ``num`` noisy copies of one input ``x`` (no batch axis)."""
    counts = np.zeros(self.num_classes, np.int64)
    x = jnp.asarray(x)
    remaining, i = int(num), 0
    while remaining > 0:
      b = min(self.batch_size, remaining)
      pred = np.asarray(self._predict(self.params, x, key, i, b=b))
      counts += np.bincount(pred, minlength=self.num_classes)
      remaining, i = remaining - b, i + 1
    return counts

  def certify(self, key, x: np.ndarray, *, n0: int, n: int, alpha: float) -> tuple[int, float]:
    """``(class, radius)`` of one input; class -1 (radius 0) is an abstention."""
    k0, k1 = jax.random.split(key)
    c_a = int(np.argmax(self.sample_noise(k0, x, n0)))
    n_a = int(self.sample_noise(k1, x, n)[c_a])
    p_a = stats.beta.ppf(alpha, n_a, n - n_a + 1) if n_a > 0 else 0.0
    if p_a < 0.5:
      return -1, 0.0
    return c_a, float(self.sigma * stats.norm.ppf(p_a))
