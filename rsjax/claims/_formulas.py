"""The formulas of the certificates, written out again with NumPy and SciPy (float64).

``scipy.special`` only (``betaincinv`` is ``scipy.stats.beta.ppf``, ``ndtri`` is
``norm.ppf``, the same values), so that ``rsjax verify`` starts fast.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike

from rsjax import _lazy
from rsjax.claims._mismatch import VerifyError

special = _lazy.module("scipy.special")  # on first use: start-up pays no SciPy

#: The noise whose certificate is rounded down (:func:`round_down`): ``gaussian_8bit``.
DIRECTED_NOISE = "gaussian_8bit"

#: Relative margin by which the sound 8-bit noise's Clopper-Pearson bound is rounded down.
#: SciPy's ``betaincinv`` (Boost's ``ibeta_inv``) is not documented to a bound; Cephes'
#: ``incbi``, which it replaced, documents a peak relative error of 5.8e-12 for integer
#: parameters up to 10,000. 1e-10 is 17 times that, and 500,000 times the largest error
#: measured against a 40-digit inversion (2.1e-16, ``tests/test_directed_rounding.py``).
P_LOWER_MARGIN = 1e-10

#: Relative margin by which the sound 8-bit noise's radius ``sigma ndtri(p)`` is rounded down:
#: Cephes' ``ndtri`` (SciPy's) and the product with sigma are within a few ulps (5e-16
#: measured together, ``tests/test_directed_rounding.py``); 1e-13 is 200 times that.
RADIUS_MARGIN = 1e-13


def round_down(x: ArrayLike, margin: float) -> np.ndarray:
  """``x (1 - margin)`` in float64: below ``x`` by at least ``margin - 2**-52`` relative for
  ``x > 0`` (0 stays 0); ``x`` itself, unchanged in every bit, when ``margin`` is 0."""
  x = np.asarray(x, np.float64)
  return x if margin == 0 else x * (1.0 - float(margin))


def directed(noise: dict) -> bool:
  """Whether a record's noise (``{"name": ...}``) reports directed-rounded bounds and radii."""
  return noise.get("name") == DIRECTED_NOISE


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
  if directed(noise):  # below sigma Phi^-1(p) in exact arithmetic (RADIUS_MARGIN)
    r = round_down(r, RADIUS_MARGIN)
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
  """The levels of ``k`` budgeted looks: ``(1 - s) alpha / (k - 1)`` each before the last,
  ``s alpha`` at the last (``s = final_share``), their exact sum at most ``alpha``.

  Each level is the float product, rounded to nearest; where the exact (rational) sum
  of the ``k`` floats exceeds ``alpha``, the early levels are stepped down an ulp at a
  time until it does not (the union bound holds for the levels actually used).
  """
  alpha = float(alpha)
  if k == 1:
    return [alpha]
  early, final = (1.0 - final_share) * alpha / (k - 1), final_share * alpha
  while Fraction(early) * (k - 1) + Fraction(final) > Fraction(alpha):
    early = float(np.nextafter(early, 0.0))
  return [early] * (k - 1) + [final]


def split_alpha(alpha: float, share: float) -> tuple[float, float]:
  """``(share alpha, the rest)`` as floats whose exact sum is at most ``alpha``
  (the anytime rule's mixture and Clopper-Pearson levels; the rest stepped down an ulp
  where ``alpha - share alpha`` rounded up)."""
  alpha = float(alpha)
  a_mix = alpha * float(share)
  rest = alpha - a_mix
  while Fraction(a_mix) + Fraction(rest) > Fraction(alpha):
    rest = float(np.nextafter(rest, 0.0))
  return a_mix, rest
