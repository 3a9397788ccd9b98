"""Host-side statistics for randomized smoothing (NumPy/SciPy, float64, no JAX).

Everything here runs on the host on small arrays of counts; it is the certificate
step of the three-step design (noise, counts, certificate). Functions accept
scalars or NumPy arrays and broadcast.

Conventions (Cohen et al. 2019):
  * ``clopper_pearson_lower(k, n, alpha)`` is the *one-sided* lower bound at level
    ``alpha``: ``P[p < bound] <= alpha``. It equals ``Beta.ppf(alpha, k, n-k+1)``
    and the reference code's ``proportion_confint(k, n, alpha=2*alpha,
    method="beta")[0]``.
  * Radii are returned as float64; a radius is only meaningful where the lower
    bound exceeds 1/2 (otherwise the smoothed classifier abstains).
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np
from numpy.typing import ArrayLike

from rsjax import _lazy

_st = _lazy.module("scipy.stats")  # 1-2 s of start-up: on first use

__all__ = [
  "ALPHA_MAX",
  "alpha_refusal",
  "check_alpha",
  "check_integral",
  "clopper_pearson_lower",
  "clopper_pearson_upper",
  "binomial_test_half",
  "gaussian_radius",
  "multiclass_bounds",
  "multiclass_radius",
  "laplace_l1_radius",
  "uniform_l1_radius",
  "uniform_linf_radius",
  "max_probability_lower",
  "max_radius",
  "min_samples_to_certify",
  "check_sample_size",
]


def check_alpha(alpha: float) -> float:
  """Returns ``alpha`` as a float, or raises ``ValueError`` unless it lies in (0, 1)."""
  try:
    a = float(alpha)
  except (TypeError, ValueError):
    raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}") from None
  if not 0.0 < a < 1.0:  # also rejects NaN
    raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
  return a


def check_integral(name: str, value: float, minimum: int = 1) -> None:
  """``ValueError`` unless ``value`` equals an integer ``>= minimum`` (``2.0`` passes too)."""
  if int(value) != value or value < minimum:
    raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


#: The largest alpha a run may claim: a certificate holds with probability 1 - alpha,
#: and a "bound" that fails more often than it holds states nothing.
ALPHA_MAX = 0.5


def alpha_refusal(alpha: object) -> str | None:
  """Why ``alpha`` is not a level a run may claim (one line), or None
  (``rsjax.claims.refusal``'s rule, which ``rsjax.Sampling`` applies too)."""
  if not isinstance(alpha, numbers.Real) or isinstance(alpha, bool):
    return f"alpha must lie in (0, {ALPHA_MAX}], got {alpha!r}"
  if not 0.0 < float(alpha) <= ALPHA_MAX:  # also NaN
    return f"alpha must lie in (0, {ALPHA_MAX}], got {alpha!r}"
  return None


def _counts(k: ArrayLike, n: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
  k = np.asarray(k, dtype=np.float64)
  n = np.asarray(n, dtype=np.float64)
  if np.any(n < 1):
    raise ValueError(f"n must be >= 1, got {n!r}")
  if np.any(k < 0) or np.any(k > n):
    raise ValueError("counts k must satisfy 0 <= k <= n")
  return k, n


def clopper_pearson_lower(k: ArrayLike, n: ArrayLike, alpha: float) -> np.ndarray:
  """One-sided Clopper-Pearson lower confidence bound.

  Args:
    k: successes, scalar or array (may be non-integer for effective counts).
    n: trials, scalar or array broadcastable with ``k``.
    alpha: one-sided error level in (0, 1).

  Returns:
    float64 array: ``Beta.ppf(alpha; k, n - k + 1)``, and 0 where ``k == 0``.
  """
  alpha = check_alpha(alpha)
  k, n = _counts(k, n)
  with np.errstate(invalid="ignore"):
    out = _st.beta.ppf(alpha, np.maximum(k, 1e-300), n - k + 1)
  return np.where(k <= 0, 0.0, out)


def clopper_pearson_upper(k: ArrayLike, n: ArrayLike, alpha: float) -> np.ndarray:
  """One-sided Clopper-Pearson upper confidence bound.

  Args:
    k: successes, scalar or array.
    n: trials, broadcastable with ``k``.
    alpha: one-sided error level in (0, 1).

  Returns:
    float64 array: ``Beta.ppf(1 - alpha; k + 1, n - k)``, and 1 where ``k == n``.
  """
  alpha = check_alpha(alpha)
  k, n = _counts(k, n)
  with np.errstate(invalid="ignore"):
    out = _st.beta.ppf(1.0 - alpha, k + 1, np.maximum(n - k, 1e-300))
  return np.where(k >= n, 1.0, out)


def binomial_test_half(n1: ArrayLike, n2: ArrayLike) -> np.ndarray:
  """Two-sided binomial test p-value of ``n1`` successes in ``n1 + n2`` at p=1/2.

  This is the test of Cohen et al.'s PREDICT (``scipy.stats.binomtest``), in its
  closed form: ``min(1, 2 * P[Bin(n1 + n2, 1/2) >= max(n1, n2)])``.

  Args:
    n1: counts of the top class, scalar or array.
    n2: counts of the runner-up, broadcastable with ``n1``.

  Returns:
    float64 p-values (1 where ``n1 + n2 == 0``).
  """
  n1 = np.asarray(n1, dtype=np.float64)
  n2 = np.asarray(n2, dtype=np.float64)
  hi = np.maximum(n1, n2)
  tot = n1 + n2
  # P[X >= hi] = sf(hi - 1).
  p = 2.0 * _st.binom.sf(hi - 1, np.maximum(tot, 1), 0.5)
  return np.where(tot <= 0, 1.0, np.minimum(1.0, p))


def gaussian_radius(p_lower: ArrayLike, sigma: ArrayLike) -> np.ndarray:
  """Cohen's binary L2 radius ``sigma * Phi^-1(p_lower)`` (0 where p_lower <= 1/2)."""
  p = np.asarray(p_lower, dtype=np.float64)
  r = np.asarray(sigma, dtype=np.float64) * _st.norm.ppf(p)
  return np.where(p > 0.5, r, 0.0)


def multiclass_bounds(
  counts_a: ArrayLike, counts_others: ArrayLike, n: ArrayLike, alpha: float
) -> tuple[np.ndarray, np.ndarray]:
  """Simultaneous bounds for the multiclass radius of Cohen et al. (Theorem 1).

  ``p_lower_A`` is the Clopper-Pearson bound at ``alpha / 2``; ``p_upper_B`` bounds
  *every* other class at once (Bonferroni over the ``C - 1`` others at
  ``alpha / 2`` in total), so both hold together with probability ``>= 1 - alpha``
  even though the runner-up is chosen from the same counts. ``p_upper_B`` is
  capped at ``1 - p_lower_A``.

  Args:
    counts_a: ``[B]`` counts of the selected class.
    counts_others: ``[B, C-1]`` counts of all other classes.
    n: number of samples per input.
    alpha: total error level.

  Returns:
    ``(p_lower_a [B], p_upper_b [B])`` float64.
  """
  alpha = check_alpha(alpha)
  others = np.asarray(counts_others, dtype=np.float64)
  num_others = max(others.shape[-1], 1)
  p_a = clopper_pearson_lower(counts_a, n, alpha / 2)
  p_b = clopper_pearson_upper(others.max(axis=-1), n, alpha / (2 * num_others))
  return p_a, np.minimum(p_b, 1.0 - p_a)


def multiclass_radius(p_lower_a: ArrayLike, p_upper_b: ArrayLike, sigma: ArrayLike) -> np.ndarray:
  """``sigma / 2 * (Phi^-1(p_lower_A) - Phi^-1(p_upper_B))``; 0 unless ``p_A > p_B``."""
  pa = np.asarray(p_lower_a, dtype=np.float64)
  pb = np.asarray(p_upper_b, dtype=np.float64)
  r = 0.5 * np.asarray(sigma, dtype=np.float64) * (_st.norm.ppf(pa) - _st.norm.ppf(pb))
  return np.where((pa > pb) & (pa > 0.0), np.maximum(r, 0.0), 0.0)


def laplace_l1_radius(p_lower: ArrayLike, lam: ArrayLike) -> np.ndarray:
  """L1 radius of Laplace noise with scale ``lam``: ``-lam * log(2 (1 - p))``."""
  p = np.asarray(p_lower, dtype=np.float64)
  with np.errstate(divide="ignore"):
    r = -np.asarray(lam, dtype=np.float64) * np.log(2.0 * (1.0 - p))
  return np.where(p > 0.5, r, 0.0)


def uniform_l1_radius(p_lower: ArrayLike, lam: ArrayLike) -> np.ndarray:
  """L1 radius of uniform noise on ``[-lam, lam]^d``: ``2 lam (p - 1/2)``."""
  p = np.asarray(p_lower, dtype=np.float64)
  return np.where(p > 0.5, 2.0 * np.asarray(lam, dtype=np.float64) * (p - 0.5), 0.0)


def uniform_linf_radius(p_lower: ArrayLike, lam: ArrayLike, dim: int) -> np.ndarray:
  """Linf radius of uniform noise on ``[-lam, lam]^d``: ``2 lam (1 - (3/2 - p)^(1/d))``."""
  p = np.asarray(p_lower, dtype=np.float64)
  r = 2.0 * np.asarray(lam, dtype=np.float64) * (1.0 - np.power(1.5 - p, 1.0 / dim))
  return np.where(p > 0.5, r, 0.0)


def max_probability_lower(n: ArrayLike, alpha: float) -> np.ndarray:
  """The largest lower bound ``n`` samples can give: ``alpha ** (1 / n)`` (all successes)."""
  alpha = check_alpha(alpha)
  return np.power(alpha, 1.0 / np.asarray(n, dtype=np.float64))


def max_radius(n: ArrayLike, alpha: float, sigma: ArrayLike = 1.0) -> np.ndarray:
  """The largest binary Gaussian radius ``n`` samples can certify at ``alpha``.

  With ``n = 100_000`` and ``alpha = 0.001`` this is ``3.81 * sigma``.
  """
  return gaussian_radius(max_probability_lower(n, alpha), sigma)


def min_samples_to_certify(alpha: float) -> int:
  """The smallest ``n`` whose all-success lower bound exceeds 1/2."""
  alpha = check_alpha(alpha)
  return int(math.floor(math.log(alpha) / math.log(0.5))) + 1


def check_sample_size(n: int, alpha: float) -> bool:
  """Warns (``UserWarning``) and returns False when ``n`` can never certify at ``alpha``."""
  need = min_samples_to_certify(alpha)
  if int(n) < need:
    warnings.warn(
      f"n={n} samples can never certify at alpha={alpha}: every input will abstain; "
      f"use n >= {need}.",
      UserWarning,
      stacklevel=3,
    )
    return False
  return True
