"""DDRS's memory-based certification (Algorithm 3), exact in float64."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from rsjax.engine.driver import ABSTAIN

__all__ = ["MemoryCertifier"]


def _toward_zero(v: float) -> float:
  """One float64 ulp toward zero: keeps touching balls disjoint despite rounding."""
  return float(np.nextafter(v, 0.0)) if v > 0 else 0.0


class MemoryCertifier:
  """Memory-based certification (DDRS Algorithm 3), exact in float64.

  ``update_batch`` computes the distances of a batch to all stored points in one
  device call and rechecks the few candidate balls exactly on the host.

  Inputs are processed in a fixed order; the memory holds triples
  ``(x_j, c_j, r_j)``. For a new ``(x, c, r)``, with ``d_j = ||x - x_j||_2`` on the
  flattened raw inputs, ball j intersects iff ``d_j < r_j + r``; ``J`` are the
  intersecting balls of another class. If ``J`` is empty ``(c, r)`` is kept;
  otherwise ``m = min_J (d_j - r_j)`` at ``j* = argmin`` (taken explicitly: the
  authors' ``rad, idx = torch.min(t)`` unpack fails on a 0-d tensor):

  * ``m < 0`` (x inside ``B(x_j*, r_j*)``): prediction ``c_j*``, radius ``|m|``
    (LargestInSubset);
  * ``m >= 0``: radius ``m`` (LargestOutSubset).

  The result is appended. Abstentions (class -1) are recorded but never form
  balls. Invariant: balls of different classes never intersect (new radii are
  rounded one ulp toward zero so that this also holds in floating point).
  """

  def __init__(self) -> None:
    self._x = None
    self._cls = np.zeros((0,), np.int64)
    self._radius = np.zeros((0,), np.float64)
    self._size = 0

  def __len__(self) -> int:
    return self._size

  @property
  def points(self) -> np.ndarray:
    """``[M, D]`` float64 flattened inputs in processing order."""
    return np.zeros((0, 0)) if self._x is None else self._x[: self._size].copy()

  @property
  def classes(self) -> np.ndarray:
    """``[M]`` int64 recorded classes (-1: abstain)."""
    return self._cls[: self._size].copy()

  @property
  def radii(self) -> np.ndarray:
    """``[M]`` float64 recorded radii."""
    return self._radius[: self._size].copy()

  def _append(self, x, cls, radius):
    if self._x is None:
      self._x = np.zeros((0, x.shape[0]), np.float64)
    if self._size == len(self._cls):  # full: 16 rows, then double
      pad = max(16, self._size)
      self._x = np.concatenate([self._x, np.zeros((pad, self._x.shape[1]))])
      self._cls = np.concatenate([self._cls, np.zeros((pad,), np.int64)])
      self._radius = np.concatenate([self._radius, np.zeros((pad,), np.float64)])
    self._x[self._size] = x
    self._cls[self._size] = cls
    self._radius[self._size] = radius
    self._size += 1

  def _check(self, xf, cls, radius):
    if not np.isfinite(radius) or radius < 0:
      raise ValueError(f"radius must be finite and >= 0, got {radius!r}")
    if cls < ABSTAIN:
      raise ValueError(f"cls must be a class index or -1 (abstain), got {cls}")
    if not np.all(np.isfinite(xf)):
      raise ValueError("x must be finite")
    if self._x is not None and xf.shape[0] != self._x.shape[1]:
      raise ValueError(f"x has {xf.shape[0]} values, the memory holds inputs of {self._x.shape[1]}")

  def _decide(self, xf, cls, radius, d_approx=None):
    """Algorithm 3 for one input against the memory, then append.

    ``d_approx`` (``[len(self)]`` float32 distances computed on device) only
    selects candidates: a stored ball can intersect only if
    ``d_approx - tol < r_j + r`` with ``tol`` far above float32 rounding; the
    candidates' distances are then recomputed exactly in float64 here.
    """
    if cls != ABSTAIN and self._size:
      mem_c = self._cls[: self._size]
      mem_r = self._radius[: self._size]
      other = (mem_c != ABSTAIN) & (mem_c != cls)
      if d_approx is not None:
        d_approx = np.asarray(d_approx, np.float64)
        tol = _DIST_RTOL * d_approx + _DIST_ATOL
        other &= d_approx - tol < mem_r + radius
      idx = np.flatnonzero(other)
      if idx.size:
        d = np.sqrt(np.sum((self._x[idx] - xf) ** 2, axis=1))  # exact float64
        hit = d < mem_r[idx] + radius
        if np.any(hit):
          idx, d = idx[hit], d[hit]
          gaps = d - mem_r[idx]
          k = int(np.argmin(gaps))
          j_star, m = idx[k], float(gaps[k])
          if m < 0:  # LargestInSubset: x lies inside a ball of another class
            cls, radius = int(mem_c[j_star]), _toward_zero(-m)
          else:  # LargestOutSubset
            radius = _toward_zero(m)
    self._append(xf, cls, radius)
    return cls, radius

  def update(self, x: ArrayLike, cls: int, radius: float) -> tuple[int, float]:
    """Processes one certified input and records it.

    Args:
      x: ``[*input_shape]`` raw input (flattened for distances).
      cls: certified class, or -1 (abstain).
      radius: certified L2 radius (>= 0).

    Returns:
      ``(cls, radius)`` after the memory check.

    Raises:
      ValueError: for a bad radius/class or an input of another size than the memory's.
    """
    xf = np.asarray(x, np.float64).reshape(-1)
    cls, radius = int(cls), float(radius)
    self._check(xf, cls, radius)
    return self._decide(xf, cls, radius)

  def update_batch(
    self, x: ArrayLike, cls: ArrayLike, radius: ArrayLike
  ) -> tuple[np.ndarray, np.ndarray]:
    """``update`` for each input of a batch, in order, with distances on device.

    The distances of the batch to every stored point and to each other are
    computed in one compiled call (float32, ``[B, M + B]``); they only select
    the few stored balls that can intersect, whose distances are recomputed
    exactly in float64 (so the result equals ``update`` input by input).

    Args:
      x: ``[B, *input_shape]`` raw inputs.
      cls: ``[B]`` classes (-1 abstain).
      radius: ``[B]`` radii.

    Returns:
      ``(cls [B] int64, radius [B] float64)`` after the memory.
    """
    x = np.asarray(x)
    cls = np.asarray(cls).reshape(-1)
    radius = np.asarray(radius, np.float64).reshape(-1)
    if x.ndim < 1 or not x.shape[0] == cls.shape[0] == radius.shape[0]:
      raise ValueError(
        f"x, cls and radius must share the batch size, got {x.shape}, {cls.shape}, {radius.shape}"
      )
    b = cls.shape[0]
    xf = x.reshape(b, -1).astype(np.float64)
    for i in range(b):
      self._check(xf[i], int(cls[i]), float(radius[i]))
    m0 = self._size
    pts = xf if m0 == 0 else np.concatenate([self._x[:m0], xf])
    d_all = np.asarray(jax.device_get(_distances(xf.astype(np.float32), pts.astype(np.float32))))
    out_c, out_r = np.empty(b, np.int64), np.empty(b, np.float64)
    for i in range(b):
      out_c[i], out_r[i] = self._decide(xf[i], int(cls[i]), float(radius[i]), d_all[i, : m0 + i])
    return out_c, out_r


#: Tolerance on the float32 device distances used to pick candidate balls
#: (float32 rounding of a 10^5-term sum of squares is below 1e-5 relative).
_DIST_RTOL, _DIST_ATOL = 1e-3, 1e-5


@jax.jit
def _distances(a, b):
  """``[A, D]``, ``[M, D]`` -> ``[A, M]`` float32 L2 distances (row by row)."""
  return jax.lax.map(lambda ai: jnp.sqrt(jnp.sum((b - ai) ** 2, axis=1)), a)
