"""Independent reference for the noncentral chi-square CDF (validation only; slow).

``P(||Z - mu||^2 <= x)`` for ``Z ~ N(0, I_N)``, ``||mu||^2 = lam``, written as
one-dimensional integral over ``V = ||Z_{2..N}||^2 ~ chi2_{N-1}`` of the exact
Gaussian probability of the remaining coordinate:
``int f_{N-1}(v) P(|Z_1 - sqrt(lam)| <= sqrt(x - v)) dv``. It uses only the
central chi-square density and the normal CDF (no noncentral code), with the
quadrature split at the places where the integrand changes fast.
"""

from __future__ import annotations

import math
import warnings

from scipy import integrate as _int
from scipy import stats as _st

__all__ = ["ball_probability"]


def ball_probability(
  x: float, dim: int, nc: float, *, upper: bool = False, epsrel: float = 1e-10
) -> float:
  """``P(||Z - mu||^2 <= x)`` (``upper=False``) or ``> x`` (``upper=True``) by quadrature.

  Args:
    x: squared radius (>= 0).
    dim: dimension N >= 1.
    nc: noncentrality ``||mu||^2``.
    upper: return the upper tail instead.
    epsrel: relative tolerance of ``scipy.integrate.quad``.

  Returns:
    The probability (float).
  """
  m = math.sqrt(nc)
  x = float(x)

  def slice_prob(v):
    s = math.sqrt(max(x - v, 0.0))
    if upper:
      return _st.norm.cdf(m - s) + _st.norm.sf(m + s)
    lo, hi = m - s, m + s
    if lo > 0:
      return _st.norm.sf(lo) - _st.norm.sf(hi)
    return _st.norm.cdf(hi) - _st.norm.cdf(lo)

  if dim == 1:
    return float(slice_prob(0.0))
  df = dim - 1
  lo = _st.chi2.ppf(1e-40, df)
  hi_all = _st.chi2.isf(1e-40, df)
  tail = float(_st.chi2.sf(x, df)) if upper else 0.0
  b = min(hi_all, x)
  if b <= lo:
    return tail
  sd_v = math.sqrt(2.0 * df)
  cand = (x - nc, x - nc - 3 * m, x - nc + 3 * m, df - 2, df - 2 - 5 * sd_v, df - 2 + 5 * sd_v)
  pts = sorted({p for p in cand if lo < p < b})
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    val, _ = _int.quad(
      lambda v: _st.chi2.pdf(v, df) * slice_prob(v),
      lo,
      b,
      points=pts or None,
      epsabs=0.0,
      epsrel=epsrel,
      limit=1000,
    )
  return float(val + tail)
