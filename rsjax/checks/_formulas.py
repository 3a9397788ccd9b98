"""The formulas of the certificates, written out again with NumPy and SciPy (float64).

``scipy.special`` only (``betaincinv`` is ``scipy.stats.beta.ppf``, ``ndtri`` is
``norm.ppf``, the same values), so that ``rsjax verify`` starts fast.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from rsjax.checks._mismatch import VerifyError


def cp_lower(k: ArrayLike, n: ArrayLike, a: float | np.ndarray) -> np.ndarray:
  """One-sided Clopper-Pearson lower bound at level ``a`` (0 where k = 0)."""
  k = np.asarray(k, np.float64)
  n = np.asarray(n, np.float64)
  with np.errstate(invalid="ignore"):
    out = special.betaincinv(np.maximum(k, 1e-300), n - k + 1, a)
  return np.where(k <= 0, 0.0, out)


def cp_upper(k: ArrayLike, n: ArrayLike, a: float | np.ndarray) -> np.ndarray:
  """One-sided Clopper-Pearson upper bound at level ``a`` (1 where k = n)."""
  k = np.asarray(k, np.float64)
  n = np.asarray(n, np.float64)
  with np.errstate(invalid="ignore"):
    out = special.betaincinv(k + 1, np.maximum(n - k, 1e-300), 1.0 - a)
  return np.where(k >= n, 1.0, out)


def binary_radius(p: ArrayLike, scale: float | np.ndarray, noise: dict, dim: int) -> np.ndarray:
  """The radius of the lower bound ``p`` for the noise family (0 where p <= 1/2)."""
  p = np.asarray(p, np.float64)
  name, norm = noise["family"], noise["norm"]
  with np.errstate(divide="ignore", invalid="ignore"):
    if name == "gaussian" and norm == "l2":
      r = scale * special.ndtri(p)
    elif name == "laplace" and norm == "l1":
      r = -scale * np.log(2.0 * (1.0 - p))
    elif name == "uniform" and norm == "l1":
      r = 2.0 * scale * (p - 0.5)
    elif name == "uniform" and norm == "linf":
      r = 2.0 * scale * (1.0 - np.power(1.5 - p, 1.0 / dim))
    else:
      raise VerifyError(f"no radius formula for {name} noise in the {norm} norm")
  return np.where(p > 0.5, r, 0.0)


def multiclass(
  n_a: ArrayLike,
  runner_up: ArrayLike,
  n: ArrayLike,
  alpha: float | np.ndarray,
  num_classes: int,
  scale: float | np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
  """Cohen's Theorem 1 with simultaneous bounds: ``(ok, radius)``."""
  others = max(num_classes - 1, 1)
  pa = cp_lower(n_a, n, alpha / 2)
  pb = np.minimum(cp_upper(runner_up, n, alpha / (2 * others)), 1.0 - pa)
  ok = pa > pb
  with np.errstate(invalid="ignore"):
    r = 0.5 * scale * (special.ndtri(pa) - special.ndtri(pb))
  return ok, np.where(ok & (pa > 0.0), np.maximum(r, 0.0), 0.0)


def budget_looks(n_max: int, first: int, ratio: float) -> list[int]:
  """The budgeted looks ``n_1 < ... < n_K = n_max`` (``rsjax.engine.budget.Budget.looks``)."""
  out, n = [], min(int(first), n_max)
  while n < n_max:
    out.append(n)
    n = max(n + 1, math.ceil(min(n * float(ratio), n_max)))  # no ceil(inf)
  return out + [n_max]


def budget_alphas(alpha: float, k: int, final_share: float) -> list[float]:
  if k == 1:
    return [alpha]
  return [(1.0 - final_share) * alpha / (k - 1)] * (k - 1) + [final_share * alpha]
