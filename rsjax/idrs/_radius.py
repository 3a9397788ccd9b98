"""IDRS certified radius (Thm 3.2), sigma-ratio thresholds (Thm 2.4) and the Rényi bound (Thm B.5).

Host-only, float64. The radius of Theorem 3.2 for an r-semi-elastic sigma(x) is

  ``CR = sup{R >= 0 : xi_>(R, sigma0 e^{-rR}) < 1/2 and xi_<(R, sigma0 e^{rR}) < 1/2}``.

Both sides are always checked. ``R -> xi(R, sigma0 e^{-/+ rR})`` is
non-decreasing (Lemma F.4: ``xi`` grows with the distance; Thm 3.1: a more
extreme sigma1 is worse), so the certified set is an interval and a bisection
on ``[0, Cohen's radius]`` (Thm B.6) finds it; the returned radius is always a
point at which both checks passed.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize as _opt
from scipy import stats as _st

from rsjax.idrs._xi import MIN_P_B, IDRSNumericalError, as_result, check_dim, xi_side
from rsjax.util import check_int

__all__ = [
  "THRESHOLD_PRESETS",
  "certified_radius",
  "is_certified",
  "renyi_radius",
  "sigma_ratio_threshold",
  "threshold_ratios",
]

#: ``sigma_t(p_A) = c + 0.001 log10(p_B)``, ``sigma_T = 1 / sigma_t`` (paper, App. D).
THRESHOLD_PRESETS = {"cifar10": 0.9993, "mnist": 0.9988}
#: Margin below 1/2 demanded of every computed xi (the evaluations are accurate to ~1e-9).
XI_MARGIN = 1e-7
#: Noncentrality cap used inside the radius search: where sigma1 is so close to
#: sigma0 that the noncentrality would exceed it, a more extreme sigma1 is used
#: instead (sound by Thm 3.1). It only binds for ``rate * sigma0 < ~5e-5``.
SEARCH_MAX_NONCENTRALITY = 1e8
_MAX_LOG_RATIO = 50.0


def threshold_ratios(thresholds: ArrayLike | None, p_b: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
  """The numerical-stability ratios ``(sigma_t, sigma_T)`` for ``p_B = 1 - p_A``.

  Args:
    thresholds: None (no thresholds: ``(1, 1)``), a preset name of
      ``THRESHOLD_PRESETS`` (``"mnist"``, ``"cifar10"``), a pair of floats
      ``(sigma_t, sigma_T)`` with ``sigma_t <= 1 <= sigma_T``, or a callable
      ``p_b -> (sigma_t, sigma_T)``.
    p_b: ``[B]`` float64.

  Returns:
    ``(sigma_t [B], sigma_T [B])``.
  """
  p_b = np.asarray(p_b, np.float64)
  if thresholds is None:
    lo, hi = np.ones_like(p_b), np.ones_like(p_b)
  elif isinstance(thresholds, str):
    if thresholds not in THRESHOLD_PRESETS:
      raise ValueError(
        f"thresholds: unknown preset {thresholds!r}, expected one of {sorted(THRESHOLD_PRESETS)}"
      )
    lo = THRESHOLD_PRESETS[thresholds] + 0.001 * np.log10(p_b)
    hi = 1.0 / lo
  elif callable(thresholds):
    lo, hi = thresholds(p_b)
  else:
    try:
      lo, hi = (float(v) for v in thresholds)
    except (TypeError, ValueError):
      raise ValueError(
        "thresholds must be None, a preset name, a pair (sigma_t, sigma_T) or "
        f"a callable, got {thresholds!r}"
      ) from None
  lo, hi, _ = np.broadcast_arrays(np.asarray(lo, np.float64), np.asarray(hi, np.float64), p_b)
  if not (np.all(lo > 0.0) and np.all(lo <= 1.0) and np.all(hi >= 1.0) and np.all(np.isfinite(hi))):
    raise ValueError("thresholds must satisfy 0 < sigma_t <= 1 <= sigma_T < inf")
  return lo, hi


def _prepare(p_lower, sigma, rate, slack, dim):
  dim = check_dim(dim)
  rate = float(rate)
  if not math.isfinite(rate) or rate < 0.0:
    raise ValueError(f"rate must be finite and >= 0, got {rate!r}")
  p, s0, sl = np.broadcast_arrays(
    np.asarray(p_lower, np.float64), np.asarray(sigma, np.float64), np.asarray(slack, np.float64)
  )
  if np.any(~np.isfinite(p)) or np.any(p < 0.0) or np.any(p >= 1.0):
    raise ValueError("p_lower must lie in [0, 1)")
  if np.any(~np.isfinite(s0)) or np.any(s0 <= 0.0):
    raise ValueError("sigma must be finite and > 0")
  if np.any(~np.isfinite(sl)) or np.any(sl < 0.0):
    raise ValueError("slack must be finite and >= 0")
  # Lowering a lower bound is sound: cap p_A at 1 - MIN_P_B (never binds for n < 1e11).
  p = np.minimum(p, 1.0 - MIN_P_B)
  return p, s0, sl, rate, dim


def _log_ratios(radius, s0, rate, slack, t_lo, t_hi):
  """Log-ratios ``log(sigma0 / sigma11)`` and ``log(sigma12 / sigma0)`` (> 0) used at ``radius``."""
  u = radius / s0
  t = rate * radius + slack
  # Thresholds: sigma11 = min(sigma_t s0, s0 e^-t), sigma12 = max(sigma_T s0, s0 e^t).
  t_gt = np.maximum(t, -np.log(t_lo))
  t_lt = np.maximum(t, np.log(t_hi))
  # Noncentrality cap u^2 / (1 - rho^2)^2 <= C (a more extreme sigma1, sound by Thm 3.1).
  # u <= Phi^-1(1 - MIN_P_B) ~ 7.03, so c < 1.
  c = u / math.sqrt(SEARCH_MAX_NONCENTRALITY)
  t_gt = np.maximum(t_gt, -0.5 * np.log1p(-c))
  t_lt = np.maximum(t_lt, 0.5 * np.log1p(c))
  return u, t_gt, t_lt


def _passes(radius, s0, p_b, rate, slack, t_lo, t_hi, dim) -> np.ndarray:
  """Both checks of Thm 3.2 at ``radius > 0`` (vectorized)."""
  u, t_gt, t_lt = _log_ratios(radius, s0, rate, slack, t_lo, t_hi)
  # sigma1 / sigma0 beyond e^{+-_MAX_LOG_RATIO} fails outright (xi is 1 to double precision
  # long before; this only avoids overflow).
  ok = (t_gt <= _MAX_LOG_RATIO) & (t_lt <= _MAX_LOG_RATIO)
  out = np.zeros(u.shape, bool)
  if np.any(ok):
    a, b = np.minimum(t_gt[ok], _MAX_LOG_RATIO), np.minimum(t_lt[ok], _MAX_LOG_RATIO)
    xi_gt = xi_side(u[ok], -np.expm1(-2.0 * a), np.exp(-2.0 * a), p_b[ok], dim, True)[0]
    xi_lt = xi_side(u[ok], np.expm1(2.0 * b), np.exp(2.0 * b), p_b[ok], dim, False)[0]
    out[ok] = (xi_gt < 0.5 - XI_MARGIN) & (xi_lt < 0.5 - XI_MARGIN)
  return out


def is_certified(
  radius: ArrayLike,
  p_lower: ArrayLike,
  *,
  sigma: ArrayLike,
  rate: float,
  dim: int,
  slack: ArrayLike = 0.0,
  thresholds: ArrayLike | None = None,
) -> np.ndarray:
  """Whether the two checks of Theorem 3.2 pass at ``radius`` (both sides).

  Args:
    radius: ``[B]`` radii (> 0) to check.
    p_lower: ``[B]`` lower bounds on the top-class probability.
    sigma: ``[B]`` sigma0 = sigma(x0).
    rate: semi-elasticity r of sigma(x).
    dim: input dimension.
    slack: ``[B]`` additive slack ``s`` in the envelope
      ``sigma0 e^{-rR-s} <= sigma1 <= sigma0 e^{rR+s}`` (float rounding of sigma(x)).
    thresholds: see ``threshold_ratios``.

  Returns:
    ``[B]`` bool.
  """
  p, s0, sl, rate, dim = _prepare(p_lower, sigma, rate, slack, dim)
  r = np.broadcast_to(np.asarray(radius, np.float64), p.shape)
  if np.any(~np.isfinite(r)) or np.any(r <= 0.0):
    raise ValueError("radius must be finite and > 0")
  p_b = 1.0 - p
  t_lo, t_hi = threshold_ratios(thresholds, p_b)
  ok = p > 0.5
  out = np.zeros(p.shape, bool)
  if np.any(ok):
    out[ok] = _passes(r[ok], s0[ok], p_b[ok], rate, sl[ok], t_lo[ok], t_hi[ok], dim)
  return out


def certified_radius(
  p_lower: ArrayLike,
  *,
  sigma: ArrayLike,
  rate: float,
  dim: int,
  slack: ArrayLike = 0.0,
  thresholds: ArrayLike | None = None,
  rtol: float = 1e-4,
  atol: float = 1e-7,
) -> np.ndarray:
  """The IDRS certified radius of Theorem 3.2 (both sides checked).

  ``CR = sup{R : xi_>(R, sigma11(R)) < 1/2 and xi_<(R, sigma12(R)) < 1/2}`` with
  ``sigma11 = min(sigma_t sigma0, sigma0 e^{-rR-s})`` and
  ``sigma12 = max(sigma_T sigma0, sigma0 e^{rR+s})``. The set is an interval, so a
  vectorized bisection on ``[0, sigma0 Phi^-1(p)]`` (Cohen's radius is an upper
  bound, Thm B.6) finds its end to within ``rtol * Cohen's radius + atol``; the
  returned radius is the lower end of the final bracket, at which both checks
  passed (radius 0 if no positive radius passed). With ``rate = 0`` and no slack
  or thresholds this is Cohen's radius ``sigma0 Phi^-1(p_lower)``.

  Args:
    p_lower: ``[B]`` (or scalar) lower confidence bound of the top class at x0.
      Abstains (radius 0) where ``p_lower <= 1/2``.
    sigma: ``[B]`` (or scalar) sigma0 = sigma(x0), the noise actually used at x0.
    rate: semi-elasticity r of sigma(x) (``|log s(x) - log s(y)| <= r ||x - y||``).
    dim: input dimension N.
    slack: ``[B]`` additive slack s >= 0 of the semi-elastic envelope (float
      rounding of sigma(x); see ``KnnSigma.evaluate``).
    thresholds: numerical-stability thresholds (App. D): None, ``"mnist"``,
      ``"cifar10"``, ``(sigma_t, sigma_T)`` or a callable of p_B. Sound by Thm 3.1
      but conservative; the evaluation here does not need them.
    rtol: bisection tolerance relative to Cohen's radius.
    atol: absolute bisection tolerance.

  Returns:
    float64 radii, shape of the broadcast arguments.

  Raises:
    ValueError: for bad arguments.
    IDRSNumericalError: where xi cannot be evaluated reliably.
  """
  p, s0, sl, rate, dim = _prepare(p_lower, sigma, rate, slack, dim)
  if not (0.0 < rtol < 1.0) or not atol >= 0.0:
    raise ValueError("rtol must lie in (0, 1) and atol must be >= 0")
  shape = p.shape
  p, s0, sl = p.ravel(), s0.ravel(), sl.ravel()
  p_b = 1.0 - p
  cohen = np.where(p > 0.5, s0 * _st.norm.ppf(p), 0.0)
  t_lo, t_hi = threshold_ratios(thresholds, p_b)
  if rate == 0.0 and np.all(sl == 0.0) and np.all(t_lo == 1.0) and np.all(t_hi == 1.0):
    return cohen.reshape(shape)
  out = np.zeros_like(p)
  act = np.flatnonzero(cohen > 0.0)
  if act.size == 0:
    return out.reshape(shape)

  def args(idx):
    return (s0[idx], p_b[idx], rate, sl[idx], t_lo[idx], t_hi[idx], dim)

  hi = cohen[act].copy()
  lo = np.zeros_like(hi)
  top = _passes(hi, *args(act))  # Thm B.6 says this never holds; kept for safety.
  lo[top] = hi[top]
  tol = rtol * cohen[act] + atol
  while True:
    open_ = (hi - lo > tol) & ~top
    if not np.any(open_):
      break
    idx = np.flatnonzero(open_)
    mid = 0.5 * (lo[idx] + hi[idx])
    ok = _passes(mid, *args(act[idx]))
    lo[idx[ok]] = mid[ok]
    hi[idx[~ok]] = mid[~ok]
  # Verify at the returned radius (both checks), whatever the search did.
  pos = lo > 0.0
  if np.any(pos) and not np.all(_passes(lo[pos], *args(act[pos]))):
    raise IDRSNumericalError("IDRS radius search: a returned radius failed its own check")
  out[act] = lo
  return out.reshape(shape)


def sigma_ratio_threshold(
  p_a: ArrayLike, dim: int, *, method: str = "theorem", side: str = "lower"
) -> np.ndarray | float:
  """The most extreme usable ``sigma1 / sigma0`` (curse of dimensionality, Thm 2.4).

  Beyond it no ``x1`` (at any distance) is certified from ``x0``.

  Args:
    p_a: top-class probability at x0, scalar or array in (0, 1).
    dim: dimension N.
    method: ``"theorem"`` (Thm 2.4 via the Chernoff bound; the paper's Table 1),
      ``"corollary"`` (Cor. 2.5, lower side only: ``sqrt(1 - 2 sqrt(-log(1-p_A)/N))``),
      or ``"exact"`` (where ``xi(0) = 1/2``, from central chi-square quantiles:
      the "practical threshold" of the paper's Figure 3).
    side: ``"lower"`` (sigma1 < sigma0: the smallest usable ratio) or
      ``"upper"`` (sigma1 > sigma0: the largest usable ratio).

  Returns:
    float64 ratio(s). The theorem's and corollary's values are sufficient
    conditions: they lie beyond the exact threshold.
  """
  n = check_int("dim", dim)  # no MAX_DIM: only central chi-square here
  p = np.asarray(p_a, np.float64)
  if np.any(~np.isfinite(p)) or np.any(p <= 0.0) or np.any(p >= 1.0):
    raise ValueError("p_a must lie in (0, 1)")
  if side not in ("lower", "upper"):
    raise ValueError(f"side must be 'lower' or 'upper', got {side!r}")
  p_b = 1.0 - p
  if method == "exact":
    med = _st.chi2.ppf(0.5, n)
    q = _st.chi2.ppf(p_b, n) if side == "lower" else _st.chi2.isf(p_b, n)
    out = np.sqrt(q / med)
  elif method == "corollary":
    if side != "lower":
      raise ValueError("method='corollary' exists for side='lower' only")
    out = np.sqrt(np.maximum(1.0 - 2.0 * np.sqrt(-np.log(p_b) / n), 0.0))
  elif method == "theorem":
    if side == "upper" and n < 2:
      raise ValueError("side='upper' of Thm 2.4 needs dim >= 2")

    def g(z, c):
      return math.log(z) + 1.0 - z - c

    vals = []
    for c in np.atleast_1d(2.0 * np.log(p_b) / n).ravel():
      if side == "lower":  # g increases on (0, 1) from -inf to 0.
        lo = 1e-300 if g(1e-300, c) < 0 else 0.0
        z = _opt.brentq(g, lo, 1.0, args=(c,), xtol=1e-15, rtol=1e-15) if lo > 0 else 0.0
        vals.append(math.sqrt(z))
      else:  # g decreases on (1, inf) from 0 to -inf; z = (s1/s0)^2 (N-1)/N.
        hi = 2.0
        while g(hi, c) > 0:
          hi *= 2.0
        z = _opt.brentq(g, 1.0, hi, args=(c,), xtol=1e-15, rtol=1e-15)
        vals.append(math.sqrt(z * n / (n - 1)))
    out = np.asarray(vals).reshape(np.shape(p))
  else:
    raise ValueError(f"method must be 'theorem', 'corollary' or 'exact', got {method!r}")
  return as_result(out)


def _renyi_objective(alpha, log_pa, log_pb, pa, pb, s0, s1, n):
  """``(2 sigma_a^2 / alpha) [L(alpha) - N/(1-alpha) log(sigma_a / (s1^{1-a} s0^a))]`` (Thm B.5)."""
  om = 1.0 - alpha
  var_a = om * s1 * s1 + alpha * s0 * s0
  # log M_{1-a}(pa, pb) = log(((pa^om + pb^om) / 2)) / om
  log_m = (np.logaddexp(om * log_pa, om * log_pb) - math.log(2.0)) / om
  inner = 1.0 - pa - pb + 2.0 * np.exp(log_m)
  with np.errstate(divide="ignore", invalid="ignore"):
    lim = -np.log(inner)
    gap = 0.5 * np.log(var_a) - om * math.log(s1) - alpha * math.log(s0)
    val = 2.0 * var_a / alpha * (lim - n / om * gap)
  return np.where(np.isfinite(val) & (var_a > 0), val, -np.inf)


def renyi_radius(
  p_a: float,
  *,
  sigma0: float,
  sigma1: float,
  dim: int,
  p_b: float | None = None,
  num_alpha: int = 4000,
) -> float:
  """Certified radius of the Rényi-divergence bound generalized to two sigmas (Thm B.5).

  ``R^2 = sup_{alpha in S} (2 sigma_a^2 / alpha) [-log(1 - p_A - p_B + 2 M_{1-alpha}(p_A, p_B))
  - N / (1 - alpha) log(sigma_a / (sigma1^{1-alpha} sigma0^alpha))]`` with
  ``sigma_a^2 = (1 - alpha) sigma1^2 + alpha sigma0^2``; ``S = (0, inf)`` for
  ``sigma0 > sigma1`` and ``(0, sigma1^2 / (sigma1^2 - sigma0^2))`` otherwise. It
  assumes sigma1 is used everywhere except at x0 (so it is a comparison, not
  a certificate for a semi-elastic sigma(x)); with ``sigma1 = sigma0`` it is Li
  et al.'s bound. The supremum is taken over a log-spaced grid of alpha refined
  locally; every alpha gives a valid bound, so the result is a lower bound of the sup.

  Args:
    p_a: top-class probability (lower bound) at x0.
    sigma0: noise at x0.
    sigma1: noise at the adversary.
    dim: dimension N.
    p_b: runner-up probability (upper bound); default ``1 - p_a``.
    num_alpha: grid size.

  Returns:
    The radius (0 when no alpha gives a positive bound).
  """
  n = check_dim(dim)
  pa = float(p_a)
  pb = 1.0 - pa if p_b is None else float(p_b)
  if not (0.0 < pa < 1.0) or not (0.0 < pb < 1.0) or pa + pb > 1.0 + 1e-12 or pb >= pa:
    raise ValueError("need 0 < p_b < p_a < 1 and p_a + p_b <= 1")
  s0, s1 = float(sigma0), float(sigma1)
  if not (s0 > 0 and s1 > 0 and math.isfinite(s0) and math.isfinite(s1)):
    raise ValueError("sigma0 and sigma1 must be finite and > 0")
  hi = 1e4 if s1 <= s0 else s1 * s1 / ((s1 - s0) * (s1 + s0))
  grid = np.geomspace(1e-6, hi * (1.0 - 1e-9), num_alpha)
  grid = grid[np.abs(grid - 1.0) > 1e-6]
  args = (math.log(pa), math.log(pb), pa, pb, s0, s1, n)
  vals = _renyi_objective(grid, *args)
  i = int(np.argmax(vals))
  best = vals[i]
  lo_a, hi_a = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
  if hi_a > lo_a:
    res = _opt.minimize_scalar(
      lambda a: -float(_renyi_objective(np.asarray(a), *args)),
      bounds=(lo_a, hi_a),
      method="bounded",
      options={"xatol": 1e-10 * hi_a},
    )
    if res.success and -res.fun > best and abs(res.x - 1.0) > 1e-6:
      best = -res.fun
  return math.sqrt(best) if best > 0 else 0.0
