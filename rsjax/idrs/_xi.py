"""Worst-case class-B probabilities of input-dependent smoothing (host, float64).

Súkeník, Kuvshinov, Günnemann (ICML 2022), Theorems 2.2 and 2.3. For the point
``x0`` smoothed with ``N(x0, sigma0^2 I)`` and an adversary ``x1`` at distance
``a`` smoothed with ``N(x1, sigma1^2 I)``, the Neyman-Pearson worst-case region
of class B (with ``P0(B) = p_B = 1 - p_A``) is a ball (``sigma1 < sigma0``) or
the complement of a ball (``sigma1 > sigma0``). ``xi`` is its probability
``P1(B)`` at the adversary; ``x1`` is certified with respect to ``x0`` iff
``xi < 1/2``.

With ``u = a / sigma0`` and ``rho = sigma1 / sigma0`` (``N`` the dimension,
``F`` / ``F^-1`` the noncentral chi-square CDF / quantile):

* ``xi_>`` (``rho < 1``): ``lam0 = u^2 / (1 - rho^2)^2``, ``lam1 = rho^2 lam0``,
  ``xi_> = F_N(lam1; F_N^-1(lam0; p_B) / rho^2)``.
* ``xi_<`` (``rho > 1``): ``lam0 = u^2 / (rho^2 - 1)^2``, ``lam1 = rho^2 lam0``,
  ``xi_< = 1 - F_N(lam1; F_N^-1(lam0; p_A) / rho^2)``, evaluated with the upper
  tail (``ncx2.isf(p_B)`` and ``ncx2.sf``) so that ``p_A`` near 1 loses nothing.

Numerics: ``scipy.stats.ncx2`` (Boost) is accurate far beyond the dimensions of
images: checked against direct integration over the exact 1-D Gaussian slice
probabilities (``experiments/idrs_numerics.py``, ``tests/test_idrs.py``) for
``N`` up to 2**20 (ImageNet included: the paper found its R-based evaluation
unusable there; this one is not), ``p_B`` down to 1e-12 and noncentralities up
to 1e10, with absolute errors below 1e-9. Beyond about 1e11 scipy returns NaN.
Every evaluation is guarded: a non-finite value, a quantile whose CDF does not
reproduce ``p_B``, a noncentrality above ``MAX_NONCENTRALITY``, a dimension
above ``MAX_DIM`` or ``p_B`` below ``MIN_P_B`` raises ``IDRSNumericalError``
instead of returning a silently wrong number.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as _st

from rsjax.util import check_int

__all__ = [
  "IDRSNumericalError",
  "MAX_DIM",
  "MAX_NONCENTRALITY",
  "MIN_P_B",
  "xi",
  "xi_greater",
  "xi_less",
  "worst_case_ball",
]

#: Largest dimension accepted: the evaluations were checked against direct
#: integration up to 2**20 (ImageNet 3x224x224 = 150,528 and 3x256x256 = 196,608
#: included; ``experiments/idrs_numerics.py``). Certification is *reliable* there,
#: but Table 1 leaves almost no room for sigma(x) to vary in such dimensions.
MAX_DIM = 2**20
#: Largest noncentrality accepted (scipy's ncx2 returns NaN from about 1e11).
MAX_NONCENTRALITY = 1e10
#: Smallest ``p_B = 1 - p_A`` accepted (quantiles validated down to 1e-12).
MIN_P_B = 1e-12
#: Relative tolerance of the quantile round trip ``F(F^-1(p_B)) == p_B``.
_ROUNDTRIP_RTOL = 1e-7


class IDRSNumericalError(ValueError):
  """The noncentral chi-square evaluation would not be reliable for these arguments."""


def check_dim(dim: int) -> int:
  dim = check_int("dim", dim)
  if dim > MAX_DIM:
    raise IDRSNumericalError(
      f"dim={dim} exceeds MAX_DIM={MAX_DIM}, the largest dimension at which the noncentral "
      "chi-square evaluations were validated"
    )
  return dim


def _check_positive(name, v) -> np.ndarray:
  v = np.asarray(v, dtype=np.float64)
  if np.any(~np.isfinite(v)) or np.any(v <= 0.0):
    raise ValueError(f"{name} must be finite and > 0")
  return v


def _check_args(a, sigma0, sigma1, p_a, dim):
  """Validated float64 ``(a, sigma0, sigma1, p_a, p_b)`` and the int ``dim``."""
  dim = check_dim(dim)
  a = np.asarray(a, dtype=np.float64)
  if np.any(~np.isfinite(a)) or np.any(a < 0.0):
    raise ValueError("a (the distance) must be finite and >= 0")
  s0 = _check_positive("sigma0", sigma0)
  s1 = _check_positive("sigma1", sigma1)
  p_a = np.asarray(p_a, dtype=np.float64)
  if np.any(~np.isfinite(p_a)) or np.any(p_a <= 0.0) or np.any(p_a >= 1.0):
    raise ValueError("p_a must lie in the open interval (0, 1)")
  p_b = 1.0 - p_a
  if np.any(p_b < MIN_P_B):
    raise IDRSNumericalError(
      f"p_a too close to 1: p_B = 1 - p_a below MIN_P_B={MIN_P_B} is outside the validated "
      "range of the chi-square quantiles (lowering p_a to 1 - MIN_P_B is sound)"
    )
  return a, s0, s1, p_a, p_b, dim


def _ncx2(fn: str, x, dim: int, lam) -> np.ndarray:
  """``scipy.stats.ncx2.<fn>`` with the central ``chi2`` where ``lam == 0``."""
  x, lam = np.broadcast_arrays(np.asarray(x, np.float64), np.asarray(lam, np.float64))
  out = np.empty(x.shape, np.float64)
  central = lam == 0.0
  with np.errstate(all="ignore"):
    if np.any(central):
      out[central] = getattr(_st.chi2, fn)(x[central], dim)
    if np.any(~central):
      out[~central] = getattr(_st.ncx2, fn)(x[~central], dim, lam[~central])
  return out


def xi_side(
  u: ArrayLike, one_minus: ArrayLike, rho2: ArrayLike, p_b: ArrayLike, dim: int, greater: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """One side on normalized arguments.

  Args:
    u: ``a / sigma0`` (>= 0).
    one_minus: ``|1 - rho^2|`` (> 0), passed separately so that callers can
      compute it without cancellation (``-expm1(-2 t)``).
    rho2: ``rho^2 = (sigma1 / sigma0)^2``.
    p_b: ``1 - p_A``.
    dim: dimension N.
    greater: True for ``xi_>`` (``rho < 1``), False for ``xi_<``.

  Returns:
    ``(xi, q, lam0, lam1)``: ``q = R^2 / sigma0^2`` is the squared radius of the
    worst-case ball in units of sigma0.
  """
  u, one_minus, rho2, p_b = np.broadcast_arrays(
    *(np.asarray(v, np.float64) for v in (u, one_minus, rho2, p_b))
  )
  with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
    lam0 = (u / one_minus) ** 2
  lam1 = rho2 * lam0
  big = ~(np.maximum(lam0, lam1) <= MAX_NONCENTRALITY)
  if np.any(big):
    worst = float(np.nanmax(np.where(np.isnan(lam0), np.inf, np.maximum(lam0, lam1))))
    raise IDRSNumericalError(
      f"noncentrality {worst:.3g} exceeds MAX_NONCENTRALITY={MAX_NONCENTRALITY:g}: sigma1 is "
      "too close to sigma0 for this distance (the noncentral chi-square is not reliable "
      "there). Use a more extreme sigma1 (sound by Thm 3.1), e.g. certified_radius's "
      "thresholds, or rate=0 for Cohen's radius"
    )
  if greater:
    q = _ncx2("ppf", p_b, dim, lam0)
    back = _ncx2("cdf", q, dim, lam0)
    val = _ncx2("cdf", q / rho2, dim, lam1)
  else:
    q = _ncx2("isf", p_b, dim, lam0)
    back = _ncx2("sf", q, dim, lam0)
    val = _ncx2("sf", q / rho2, dim, lam1)
  ok = (
    np.isfinite(q)
    & np.isfinite(val)
    & (val >= 0.0)
    & (val <= 1.0)
    & (np.abs(back - p_b) <= _ROUNDTRIP_RTOL * p_b)
  )
  if not np.all(ok):
    i = np.flatnonzero(~ok.ravel())[0]
    raise IDRSNumericalError(
      f"noncentral chi-square evaluation failed (dim={dim}, noncentrality "
      f"{lam0.ravel()[i]:.6g}, p_B={p_b.ravel()[i]:.3g}: quantile {q.ravel()[i]!r}, "
      f"round trip {back.ravel()[i]!r}, xi {val.ravel()[i]!r})"
    )
  return val, q, lam0, lam1


def as_result(v):
  """``v`` as float64: a Python float for a scalar, else an array."""
  v = np.asarray(v, np.float64)
  return v[()] if v.ndim == 0 else v


def xi_greater(
  a: ArrayLike, *, sigma0: ArrayLike, sigma1: ArrayLike, p_a: ArrayLike, dim: int
) -> np.ndarray | float:
  """``xi_>``: worst-case class-B probability at the adversary, ``sigma1 < sigma0``.

  Args:
    a: distance ``||x1 - x0||_2`` (>= 0), scalar or array.
    sigma0: noise level at ``x0``.
    sigma1: noise level at ``x1``, strictly smaller than ``sigma0``.
    p_a: probability of the top class at ``x0`` (in practice its lower bound).
    dim: input dimension N.

  Returns:
    float64 (array if any argument is an array), broadcast over the arguments.

  Raises:
    ValueError: for bad arguments (``sigma1 >= sigma0`` included).
    IDRSNumericalError: where the value cannot be computed reliably.
  """
  a, s0, s1, _, p_b, dim = _check_args(a, sigma0, sigma1, p_a, dim)
  if np.any(s1 >= s0):
    raise ValueError("xi_greater needs sigma1 < sigma0 (use xi_less for sigma1 > sigma0)")
  rho = s1 / s0
  return as_result(xi_side(a / s0, (1.0 - rho) * (1.0 + rho), rho * rho, p_b, dim, True)[0])


def xi_less(
  a: ArrayLike, *, sigma0: ArrayLike, sigma1: ArrayLike, p_a: ArrayLike, dim: int
) -> np.ndarray | float:
  """``xi_<``: worst-case class-B probability at the adversary, ``sigma1 > sigma0``.

  Args:
    a: distance ``||x1 - x0||_2`` (>= 0), scalar or array.
    sigma0: noise level at ``x0``.
    sigma1: noise level at ``x1``, strictly larger than ``sigma0``.
    p_a: probability of the top class at ``x0``.
    dim: input dimension N.

  Returns:
    float64, broadcast over the arguments.

  Raises:
    ValueError: for bad arguments (``sigma1 <= sigma0`` included).
    IDRSNumericalError: where the value cannot be computed reliably.
  """
  a, s0, s1, _, p_b, dim = _check_args(a, sigma0, sigma1, p_a, dim)
  if np.any(s1 <= s0):
    raise ValueError("xi_less needs sigma1 > sigma0 (use xi_greater for sigma1 < sigma0)")
  rho = s1 / s0
  return as_result(xi_side(a / s0, (rho - 1.0) * (rho + 1.0), rho * rho, p_b, dim, False)[0])


def xi(
  a: ArrayLike, *, sigma0: ArrayLike, sigma1: ArrayLike, p_a: ArrayLike, dim: int
) -> np.ndarray | float:
  """``xi_>``, ``xi_<`` or Cohen's half-space value, by the sign of ``sigma1 - sigma0``.

  For ``sigma1 == sigma0`` the worst case is Cohen's half-space and
  ``xi = Phi(a / sigma0 - Phi^-1(p_a))``.

  Returns:
    float64, broadcast over the arguments.
  """
  a, s0, s1, p_a, p_b, dim = _check_args(a, sigma0, sigma1, p_a, dim)
  a, s0, s1, p_a, p_b = np.broadcast_arrays(a, s0, s1, p_a, p_b)
  out = np.array(_st.norm.cdf(a / s0 - _st.norm.isf(p_b)), dtype=np.float64)
  rho = s1 / s0
  for greater, mask in ((True, s1 < s0), (False, s1 > s0)):
    if np.any(mask):
      r = rho[mask]
      out[mask] = xi_side(
        a[mask] / s0[mask], np.abs((1.0 - r) * (1.0 + r)), r * r, p_b[mask], dim, greater
      )[0]
  return as_result(out)


def worst_case_ball(
  a: float, *, sigma0: float, sigma1: float, p_a: float, dim: int
) -> tuple[float, float, bool]:
  """The Neyman-Pearson worst-case ball of Theorem 2.2 (for checks and plots).

  Coordinates are along the segment from ``x0`` (0) to ``x1`` (``a``).

  Args:
    a: distance (scalar).
    sigma0, sigma1: noise levels at ``x0`` and ``x1`` (different).
    p_a: probability of class A at ``x0``.
    dim: dimension.

  Returns:
    ``(center, radius, is_class_b)``: the ball has center ``x0 + center * e``
    (``e`` the unit vector towards ``x1``) and the given radius. For
    ``sigma1 < sigma0`` the ball is the class-B region (``is_class_b`` True);
    for ``sigma1 > sigma0`` it is the class-A region and B is its complement.
  """
  a, s0, s1, _, p_b, dim = _check_args(a, sigma0, sigma1, p_a, dim)
  a, s0, s1 = float(a), float(s0), float(s1)
  if s1 == s0:
    raise ValueError("sigma1 == sigma0: the worst case is Cohen's half-space, not a ball")
  greater = s1 < s0
  rho = s1 / s0
  _, q, _, _ = xi_side(a / s0, abs((1.0 - rho) * (1.0 + rho)), rho * rho, p_b, dim, greater)
  center = s0 * s0 / (s0 * s0 - s1 * s1) * a
  return center, s0 * math.sqrt(float(q)), greater
