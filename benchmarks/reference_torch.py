"""PyTorch reference: Cohen et al.'s sampling loop and the rsjax models in PyTorch.

This is the baseline the throughput benchmark compares against. It has three parts:

* ``sample_noise_reference``: a faithful re-implementation of
  ``Smooth._sample_noise`` of the reference code (``locuslab/smoothing``,
  ``code/core.py``): for each batch of ``batch_size`` (400 in the paper runs) it
  repeats the image (``x.repeat``), draws ``torch.randn_like(batch) * sigma``,
  runs the base classifier in float32 under ``torch.no_grad()``, takes the
  ``argmax``, copies the predictions to the host (``.cpu().numpy()``) and counts
  them with a Python loop. The only change is the device: the reference asks for
  ``device='cuda'``; here the noise is made on the device of the input.
* ``from_flax`` (``rsjax.bench.torch_models``): the same network as an
  ``rsjax.models`` model, with the same weights, in PyTorch.
* the *tuned* twin and its compiled form, the baseline of the GPU suite
  (docs/PERFORMANCE.md) and of ``rsjax bench --twin``: ``rsjax.bench.twin``
  (``tuned_module``, ``tuned_counts``, ``tuned_certify``, ``compiled_twin``), handed on
  here for the benchmarks.

PyTorch is an optional extra (``pip install torch``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from rsjax.bench.twin import (
  COMPILE_MODES,
  compiled_twin,
  peak_memory_mb,
  reset_peak_memory,
  torch_device,
  torch_generator,
  tuned_certify,
  tuned_counts,
  tuned_module,
)

__all__ = [
  "COMPILE_MODES",
  "compiled_twin",
  "peak_memory_mb",
  "reset_peak_memory",
  "sample_noise_reference",
  "torch_device",
  "torch_generator",
  "tuned_certify",
  "tuned_counts",
  "tuned_module",
]


# ------------------------------------------------------------------------------------------------
# The reference sampling loop (Cohen et al., ``Smooth._sample_noise`` / ``_count_arr``).
# ------------------------------------------------------------------------------------------------


def _count_arr(arr: np.ndarray, length: int) -> np.ndarray:
  counts = np.zeros(length, dtype=int)
  for idx in arr:
    counts[idx] += 1
  return counts


def sample_noise_reference(
  base_classifier: nn.Module,
  x: torch.Tensor,
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
