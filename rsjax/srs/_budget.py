"""The mismatch budget of SRS: how many check samples a radius needs (host).

SRS's two-stage certificate (``rsjax.srs.srs_p_lower``) is largest when every
sample agrees: all ``N`` SRS labels are the class, and all ``m`` check samples
too, under SRS and under the full solver. Then ``r = LCB(m, m, alpha/2) =
(alpha/2)^(1/m)`` and the paper form gives ``p_lower = LCB(N r, N, alpha/2)``.
That value caps ``p_lower`` for any input, whatever the model, so
``sigma * Phi^-1(cap)`` is the largest radius a run with these ``N``, ``m``,
``alpha`` can certify. With ``m`` large the cap tends to standard RS's
``(alpha/2)^(1/N)``; with ``m`` small it is far below it. At ``alpha = 0.001``:

=========  ======  =======  ==============  ===================================
N          m       cap      radius / sigma  authors' code form, radius / sigma
=========  ======  =======  ==============  ===================================
2,000      200     0.947    1.61            2.66
10,000     400     0.976    1.98            3.17
10,000     1,000   0.989    2.29            3.17
standard RS, N = 10,000 (alpha/2)  0.99924  3.17
=========  ======  =======  ==============  ===================================

So the paper's setting (``N = 10,000``, ``m = 400``) certifies no radius above
``1.98 sigma`` in the paper form (0.50 at ``sigma = 0.25``, 0.99 at
``sigma = 0.5``), against ``3.17 sigma`` for standard RS; reaching ``2 sigma``
takes ``m = 420`` and ``3 sigma`` about 27,500 check samples.

``max_certifiable_radius`` gives the cap and its radius; ``min_check_samples``
inverts it: the smallest ``m`` whose cap reaches a target radius.
"""

from __future__ import annotations

from scipy import stats as _st

from rsjax.srs._bound import srs_p_lower
from rsjax.util import check_alpha, check_int

__all__ = ["mismatch_cap", "max_certifiable_radius", "min_check_samples"]


def mismatch_cap(n: int, m: int, alpha: float, correction: str = "paper") -> float:
  """The largest ``p_lower`` of the SRS certificate (all samples agree).

  Args:
    n: estimation samples ``N``.
    m: check samples.
    alpha: total error level (each stage uses ``alpha / 2``).
    correction: ``"paper"`` (default, sound) or ``"authors_code"``.

  Returns:
    The cap on ``p_lower``, a float in ``[0, 1)``.
  """
  n = check_int("n", n)
  m = check_int("m", m)
  p, _ = srs_p_lower(n, n, m, m, check_alpha(alpha), correction)
  return float(p)


def max_certifiable_radius(
  n: int, m: int, alpha: float, sigma: float, correction: str = "paper"
) -> float:
  """The largest Gaussian L2 radius SRS can certify with ``N = n`` and ``m`` checks.

  Args:
    n: estimation samples ``N``.
    m: check samples.
    alpha: total error level.
    sigma: noise level.
    correction: ``"paper"`` (default) or ``"authors_code"``.

  Returns:
    ``sigma * Phi^-1(mismatch_cap(n, m, alpha))`` (0 when the cap is <= 1/2).

  Examples:
    >>> round(max_certifiable_radius(10_000, 400, 0.001, 0.5), 3)
    0.991
  """
  if not sigma > 0:
    raise ValueError(f"sigma must be > 0, got {sigma!r}")
  cap = mismatch_cap(n, m, alpha, correction)
  return float(sigma * _st.norm.ppf(cap)) if cap > 0.5 else 0.0


def min_check_samples(
  radius: float,
  n: int,
  alpha: float,
  sigma: float,
  correction: str = "paper",
  m_max: int = 10_000_000,
  count: int | None = None,
) -> int:
  """The smallest ``m`` whose ``max_certifiable_radius`` reaches ``radius``.

  The cap grows with ``m`` (towards standard RS's ``(alpha/2)^(1/N)``), so a
  bisection over ``m`` finds it. With ``count``, the bound is one input's
  instead of the cap: that input's SRS count of its class is ``count`` of
  ``N``, its check samples are labelled as the count suggests
  (``m * count // N`` of the class) and all of them agree with the full solver.

  Args:
    radius: target radius (>= 0; 0 asks for any certificate: a bound above 1/2).
    n: estimation samples ``N``.
    alpha: total error level.
    sigma: noise level.
    correction: ``"paper"`` (default) or ``"authors_code"``.
    m_max: largest ``m`` considered.
    count: an input's SRS count of its class (``<= n``); ``None`` (default)
      means ``n``, which gives the cap.

  Returns:
    The smallest such ``m``.

  Raises:
    ValueError: if no ``m <= m_max`` reaches ``radius`` (with ``N = n`` samples
      even standard RS at ``alpha / 2`` may not).
  """
  if not radius >= 0:
    raise ValueError(f"radius must be >= 0, got {radius!r}")
  if not sigma > 0:
    raise ValueError(f"sigma must be > 0, got {sigma!r}")
  n = check_int("n", n)
  count = n if count is None else check_int("count", count)
  if count > n:
    raise ValueError(f"count must be <= n={n}, got {count}")

  def bound_radius(m: int) -> float:
    m_a = m * count // n
    p, _ = srs_p_lower(count, n, m_a, m_a, check_alpha(alpha), correction)
    return float(sigma * _st.norm.ppf(p)) if p > 0.5 else -float("inf")  # abstains

  if not bound_radius(m_max) >= radius:
    raise ValueError(
      f"radius {radius} is out of reach with N={n}, count={count}, alpha={alpha}, "
      f"sigma={sigma}: at most {bound_radius(m_max):.3f} even with m={m_max}; "
      "raise N"
    )
  lo, hi = 0, int(m_max)  # the bound reaches radius at hi, not at lo (m >= 1)
  while hi - lo > 1:
    mid = (lo + hi) // 2
    if bound_radius(mid) >= radius:
      hi = mid
    else:
      lo = mid
  return hi
