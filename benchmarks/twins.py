"""The baselines rsjax is compared against: Cohen et al.'s ``core.py`` per-image loop in plain
JAX and in PyTorch, and the tuned PyTorch twin of the GPU suite.

* :class:`ReferenceLoop`: ``locuslab/smoothing``'s ``code/core.py`` with the forward pass of an
  rsjax model (the same weights), written the plain way: one jitted function per batch shape
  (noise from ``fold_in(key, batch index)``, forward, argmax), a host loop over
  ``ceil(num / batch_size)`` batches (the last one shorter), each prediction vector counted with
  ``np.bincount`` (faster than the reference's Python loop: the comparison errs in the
  reference's favour), and ``certify`` (Clopper-Pearson, radius ``sigma * Phi^-1(pA)``). Its
  noise is not rsjax's; a speed baseline only (``benchmarks.calls``).
* :func:`sample_noise_reference`: ``Smooth._sample_noise`` re-run as published (``x.repeat``,
  ``torch.randn_like(batch) * sigma``, float32 forward under ``no_grad``, ``argmax``,
  ``.cpu().numpy()`` and a Python counting loop); the only change is the device (the
  reference hard-codes ``cuda``). The network: ``rsjax.app.bench.torch_models.from_flax``.
* the *tuned* twin and its compiled form, the GPU suite's baseline and ``rsjax bench --twin``'s
  (``rsjax.app.bench.twin``: ``tuned_module``, ``tuned_certify``, ``compiled_twin``, ...), handed on
  here for the benchmarks when PyTorch (an optional extra) is installed.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

__all__ = ["ReferenceLoop", "sample_noise_reference", "tuned"]


def tuned() -> Any:
  """``rsjax.app.bench.twin`` (imports PyTorch): the tuned twin, its compiled form, its generator
  and memory peaks."""
  from rsjax.app.bench import twin

  return twin


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


def _count_arr(arr: np.ndarray, length: int) -> np.ndarray:
  counts = np.zeros(length, dtype=int)
  for idx in arr:
    counts[idx] += 1
  return counts


def sample_noise_reference(
  base_classifier: Any,
  x: Any,
  num: int,
  batch_size: int,
  *,
  sigma: float,
  num_classes: int,
) -> np.ndarray:
  """Class counts of ``num`` noisy copies of one input, as the reference code computes them.

  Args:
    base_classifier: module mapping ``[b, C, H, W]`` (or ``[b, *shape]``) to logits.
    x: one input ``[C, H, W]`` (no batch axis), as in the reference.
    num: number of samples.
    batch_size: forward batch (400 in Cohen et al.'s runs).
    sigma: Gaussian noise standard deviation.
    num_classes: number of classes.

  Returns:
    ``[num_classes]`` int counts (NumPy).
  """
  import torch

  base_classifier.eval()
  with torch.no_grad():
    counts = np.zeros(num_classes, dtype=int)
    for _ in range(math.ceil(num / batch_size)):
      this_batch_size = min(batch_size, num)
      num -= this_batch_size
      batch = x.repeat((this_batch_size,) + (1,) * x.dim())
      noise = torch.randn_like(batch, device=x.device) * sigma
      predictions = base_classifier(batch + noise).argmax(1)
      counts += _count_arr(predictions.cpu().numpy(), num_classes)
    return counts
