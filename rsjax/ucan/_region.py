"""The anisotropic certified region ``||delta / sigma||_p <= R`` and its radii (host, float64)."""

from __future__ import annotations

import numpy as np
from jax.typing import ArrayLike

from rsjax import noise as noise_lib

__all__ = ["NORM_ORDERS", "alm", "in_certified_region", "isotropic_radius", "normalized_radius"]

#: The ``ord`` of ``np.linalg.norm`` of each norm name.
NORM_ORDERS = {"l1": 1, "l2": 2, "linf": np.inf}


def normalized_radius(
  p_lower: ArrayLike, *, noise: noise_lib.Noise | str | None = None, dim: int | None = None
) -> np.ndarray:
  """The isotropic radius ``R`` of the unit-scale base noise (host, float64).

  Args:
    p_lower: ``[B]`` lower bounds on the top-class probability.
    noise: base noise family (default Gaussian, L2).
    dim: input dimension, needed by the Linf radius of uniform noise.

  Returns:
    ``[B]`` float64 ``R`` (0 where ``p_lower <= 1/2``).
  """
  noise = noise_lib.get_noise(noise)
  if dim is None:
    if isinstance(noise, noise_lib.Uniform) and noise.norm == "linf":
      raise ValueError("dim is required for uniform noise with the linf norm")
    dim = 1
  p = np.asarray(p_lower, np.float64)
  safe = np.where(p > 0.5, p, 0.75)
  return np.where(p > 0.5, np.asarray(noise.radius(safe, 1.0, dim), np.float64), 0.0)


def in_certified_region(
  delta: ArrayLike, sigma: ArrayLike, radius: ArrayLike, norm: str = "l2"
) -> np.ndarray:
  """Whether ``||delta / sigma||_p <= radius`` (host, float64).

  Args:
    delta: ``[B, *input_shape]`` perturbations.
    sigma: ``[*input_shape]`` or ``[B, *input_shape]`` noise scales (> 0).
    radius: float or ``[B]`` normalized radii ``R``.
    norm: ``"l2"``, ``"l1"`` or ``"linf"``.

  Returns:
    ``[B]`` bool.
  """
  if norm not in NORM_ORDERS:
    raise ValueError(f"norm must be one of {sorted(NORM_ORDERS)}, got {norm!r}")
  delta = np.asarray(delta, np.float64)
  if delta.ndim < 2:
    raise ValueError(f"delta must have shape [B, *input_shape], got {delta.shape}")
  sig = np.broadcast_to(np.asarray(sigma, np.float64), delta.shape)
  u = (delta / sig).reshape(delta.shape[0], -1)
  return np.linalg.norm(u, ord=NORM_ORDERS[norm], axis=1) <= np.asarray(radius, np.float64)


def _reduce_sigma(r, sigma, fn) -> np.ndarray:
  r = np.asarray(r, np.float64)
  sig = np.asarray(sigma, np.float64)
  if np.any(~np.isfinite(sig)) or np.any(sig <= 0):
    raise ValueError("sigma must be finite and > 0 everywhere")
  if r.ndim == 0:
    return fn(sig.reshape(-1)) * r
  if r.ndim != 1 or sig.ndim < 2 or sig.shape[0] not in (1, r.shape[0]):
    raise ValueError(
      f"for radius of shape [B]={r.shape}, sigma must have shape [B or 1, "
      f"*input_shape], got {sig.shape}"
    )
  return fn(sig.reshape(sig.shape[0], -1), axis=1) * r


def isotropic_radius(radius: ArrayLike, sigma: ArrayLike) -> np.ndarray:
  """``min_i sigma_i * R``: the ball inside the region (UCAN Corollary 3.3, sound).

  Args:
    radius: float, or ``[B]`` normalized radii ``R``.
    sigma: for float ``radius`` any shape; for ``[B]`` radii
      ``[B or 1, *input_shape]``.

  Returns:
    float64, shaped like ``radius``.
  """
  return _reduce_sigma(radius, sigma, np.min)


def alm(radius: ArrayLike, sigma: ArrayLike) -> np.ndarray:
  """UCAN's "alternative Lebesgue measure" ``exp(mean_i log sigma_i) * R``.

  The radius of the isotropic ball with the volume of the region
  ``{delta : ||delta / sigma||_p <= R}``. It is **not** a ball guarantee: the
  region is thin along small ``sigma_i``, and points at distance less than the
  ALM can change the prediction. Reviewers of UCAN disputed whether it measures
  robustness at all; it is reported only to compare with the paper. Arguments as
  :func:`isotropic_radius`.
  """
  return _reduce_sigma(radius, sigma, lambda s, axis=None: np.exp(np.mean(np.log(s), axis=axis)))
