"""Synthetic datasets with known geometry (ground truth for soundness tests).

- ``linear``: binary, 16 features (``input_shape (16,)``). The true boundary is
  the hyperplane ``w . x + b = 0`` with ``w = ones(16) / 4`` (unit norm) and
  ``b = -w . (0.5, ..., 0.5)`` (through the centre of the unit cube). Each
  example is ``x = 0.5 + s m w + e`` with label ``(s + 1) / 2`` for a sign
  ``s``, margin ``m ~ U[0.02, 0.5]`` and ``e`` Gaussian (std 0.1) projected
  orthogonally to ``w``; so its exact L2 distance to the boundary is ``m``
  (``extras["distance"]``), and ``extras["w"]``, ``extras["b"]`` give the
  hyperplane. Features are not clipped to [0, 1]. Train 2,000 (seed 0), test
  500 (seed 1).
- ``toy2d``: two interleaved half-moons (scikit-learn ``make_moons``, noise
  0.1) affinely mapped into [0, 1]^2, ``input_shape (2,)``, 2 classes. Train
  1,000 (seed 0), test 500 (seed 1).
"""

from __future__ import annotations

import numpy as np

from rsjax.data._dataset import ArrayDataset

__all__ = ["load_linear", "load_toy2d"]

_SEEDS = {"train": 0, "test": 1}
LINEAR_DIM = 16


def load_linear(split: str, *, num: int | None = None) -> ArrayDataset:
  """The "linear" dataset (see module docstring)."""
  n = num or {"train": 2000, "test": 500}[split]
  rng = np.random.default_rng(_SEEDS[split])
  d = LINEAR_DIM
  w = np.full(d, 1.0 / np.sqrt(d))
  center = np.full(d, 0.5)
  b = -float(w @ center)
  s = rng.choice(np.array([-1.0, 1.0]), size=n)
  m = rng.uniform(0.02, 0.5, size=n)
  e = 0.1 * rng.standard_normal((n, d))
  e -= np.outer(e @ w, w)
  x = (center + (s * m)[:, None] * w + e).astype(np.float32)
  y = ((s + 1) // 2).astype(np.int64)
  distance = np.abs(x.astype(np.float64) @ w + b)  # exact for the stored float32 inputs
  return ArrayDataset(
    x, y, name="linear", split=split, num_classes=2, extras={"w": w, "b": b, "distance": distance}
  )


def load_toy2d(split: str) -> ArrayDataset:
  """The "toy2d" half-moons dataset (see module docstring)."""
  from sklearn.datasets import make_moons

  n = {"train": 1000, "test": 500}[split]
  x, y = make_moons(n_samples=n, noise=0.1, random_state=_SEEDS[split])
  # make_moons lies in about [-1.5, 2.5] x [-1, 1.5] (noise 0.1); a fixed map into [0, 1]^2.
  x = (x - np.array([-1.5, -1.0])) / np.array([4.0, 2.5])
  x = np.clip(x, 0.0, 1.0)
  return ArrayDataset(
    x.astype(np.float32), y.astype(np.int64), name="toy2d", split=split, num_classes=2
  )
