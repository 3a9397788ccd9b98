"""The sound 8-bit noise's certificate rounded down, and the alpha splits' exact sums.

``gaussian_8bit`` certifies in the arithmetic actually performed (Voracek and Hein,
ICLR 2023), so its reported ``p_lower`` and radius are rounded down below their exact
values (``rsjax.claims.P_LOWER_MARGIN``, ``RADIUS_MARGIN``), by the engine and by
``rsjax verify`` alike; the exact values here come from a 40-digit inversion (mpmath).
The default Gaussian keeps its round-to-nearest numbers bit for bit.
"""

from fractions import Fraction

import numpy as np
import pytest

from rsjax import claims, noise, stats
from rsjax.engine import anytime, budget
from rsjax.engine.cohen_rule import certificate_from_counts

mp = pytest.importorskip("mpmath")
mp.mp.dps = 40


def _tail(k, n, x):
  """``P(Bin(n, x) >= k) = I_x(k, n - k + 1)``, summed from ``i = n`` down (mpmath)."""
  r, t = (1 - x) / x, x**n
  s = t
  for i in range(n, k, -1):
    t = t * i / (n - i + 1) * r
    s += t
  return s


def _exact_cp(k, n, a):
  """The Clopper-Pearson lower bound to 40 digits: Newton on ``I_x(k, n - k + 1) = a``."""
  lb = mp.log(mp.beta(k, n - k + 1))
  x = mp.mpf(float(stats.clopper_pearson_lower(k, n, a)))
  for _ in range(4):
    x -= (_tail(k, n, x) - a) / mp.exp((k - 1) * mp.log(x) + (n - k) * mp.log1p(-x) - lb)
  assert abs(_tail(k, n, x) - a) < mp.mpf(10) ** -30 * a
  return x


POINTS = [
  (k, n)
  for n in (100, 1000, 10_000, 100_000)
  for k in sorted(
    {n, n - 1, n - 2, n - 10, int(0.999 * n), int(0.99 * n), int(0.9 * n), n // 2 + 1}
  )
]
ALPHAS = (0.001, 0.0004, 0.05, 1e-4)
SIGMAS = (0.12, 0.25, 0.5, 1.0)


def _engine(k, n, alpha, sigma, fam):
  k = np.asarray(k)
  c0 = np.tile([[0, 1]], (len(k), 1))
  c1 = np.stack([n - k, k], axis=1)
  cert = certificate_from_counts(c0, c1, n=n, alpha=alpha, scale=sigma, dim=1, noise=fam)
  return cert.p_lower, cert.radius


def _verify(k, n, alpha, sigma):
  m = len(k)
  rows = claims.Rows(np.ones(m, bool), np.ones(m, np.int64), np.asarray(k), np.zeros(m, np.int64),
                     np.full(m, n), np.full(m, alpha), np.full(m, np.nan))  # fmt: skip
  rec = {"noise": {"family": "gaussian", "name": "gaussian_8bit", "norm": "l2"},
         "input_shape": [1], "multiclass": False}  # fmt: skip
  _, radius, p = claims.cohen_certificate(rec, rows, sigma)
  return p, radius


def test_8bit_p_lower_and_radius_are_below_the_exact_ones():
  worst_p = worst_r = 0.0
  slack_p, slack_r = np.inf, np.inf
  for alpha in ALPHAS:
    for n in sorted({n for _, n in POINTS}):
      ks = [k for k, nn in POINTS if nn == n]
      exact = [_exact_cp(k, n, alpha) for k in ks]
      raw = stats.clopper_pearson_lower(ks, n, alpha)
      worst_p = max(
        worst_p, max(abs(float((mp.mpf(r) - e) / e)) for r, e in zip(raw, exact, strict=True))
      )
      for sigma in SIGMAS:
        s = float(np.float32(sigma))  # the engine's sigma: a float32 value
        fam = noise.Gaussian8bit(sigma=s)
        p8, r8 = _engine(ks, n, alpha, s, fam)
        vp, vr = _verify(ks, n, alpha, s)
        np.testing.assert_array_equal(vp, p8)  # verify recomputes the same directed values
        np.testing.assert_array_equal(vr, r8)
        for e, p, r in zip(exact, p8, r8, strict=True):
          assert mp.mpf(p) < e, (n, alpha, p)
          slack_p = min(slack_p, float((e - mp.mpf(p)) / e))
          r_exact = s * mp.sqrt(2) * mp.erfinv(2 * e - 1) if e > 0.5 else mp.mpf(0)
          assert mp.mpf(r) <= r_exact, (n, alpha, sigma, r, r_exact)
          if e > 0.5:
            ndtri_err = abs(float(s * stats.gaussian_radius(p, 1.0) / (s * mp.sqrt(2)
                                  * mp.erfinv(2 * mp.mpf(p) - 1)) - 1))  # fmt: skip
            worst_r = max(worst_r, ndtri_err)
            slack_r = min(slack_r, float((r_exact - mp.mpf(r)) / r_exact))
        # The default Gaussian's certificate is unchanged, bit for bit.
        pg, rg = _engine(ks, n, alpha, s, noise.GAUSSIAN)
        np.testing.assert_array_equal(pg, raw)
        np.testing.assert_array_equal(rg, np.where(raw > 0.5, stats.gaussian_radius(raw, s), 0.0))
  # The margins dwarf the functions' errors (measured here: under an ulp each).
  assert worst_p < claims.P_LOWER_MARGIN / 1e4 and worst_r < claims.RADIUS_MARGIN / 100
  assert slack_p >= 0.99 * claims.P_LOWER_MARGIN and slack_r > 0.0
  print(f"betaincinv err {worst_p:.2e}, ndtri err {worst_r:.2e}, slack p {slack_p:.2e}, "
        f"R {slack_r:.2e}")  # fmt: skip


def test_8bit_budgeted_and_anytime_bounds_are_rounded_down():
  fam = noise.Gaussian8bit(sigma=0.25)
  table = anytime.anytime_decisions(
    anytime.Anytime(grid=(0.0, 0.25, 0.5)), n_max=2000, alpha=0.001, noise=fam, scales=[0.25]
  )
  assert table.cp_margin == claims.P_LOWER_MARGIN
  s = np.arange(1000, 2001)
  _, p_lower, _ = table.decide(s, -1)
  cp = stats.clopper_pearson_lower(s, 2000, table.cp_alpha) * (1 - claims.P_LOWER_MARGIN)
  assert np.all(p_lower >= cp) and np.all(
    p_lower[p_lower > table.m[0, -1]] == cp[p_lower > table.m[0, -1]]
  )
  gauss = anytime.anytime_decisions(anytime.Anytime(grid=(0.0, 0.25, 0.5)), n_max=2000, alpha=0.001,
                                    scales=[0.25])  # fmt: skip
  assert gauss.cp_margin == 0.0
  assert (
    fam.radius(np.array([0.9]), 0.25, 1)[0] < noise.GAUSSIAN.radius(np.array([0.9]), 0.25, 1)[0]
  )


@pytest.mark.parametrize("alpha", [0.001, 0.05, 1e-4, 0.3, 0.0007, 1 / 3])
def test_alpha_splits_sum_to_at_most_alpha_exactly(alpha):
  over = 0
  for k in range(1, 400, 7):
    for share in (0.5, 0.3, 0.7, 0.1, 1 / 3, 0.9, 1.0):
      levels = claims.budget_alphas(alpha, k, share)
      exact = sum(Fraction(v) for v in levels)
      assert exact <= Fraction(alpha) and all(v >= 0 for v in levels) and levels[-1] > 0
      naive = [(1.0 - share) * alpha / (k - 1)] * (k - 1) + [share * alpha] if k > 1 else [alpha]
      over += sum(Fraction(v) for v in naive) > Fraction(alpha)
      # A few ulps below the rounded-to-nearest split at most (about s / (1 - s) ulps).
      assert all(0 <= b - a <= 1e-14 * b for a, b in zip(levels, naive, strict=True))
  assert over > 0  # the naive split does overspend somewhere in this range
  rule = budget.Budget(grid=(0.0, 0.5))
  np.testing.assert_array_equal(
    rule.alphas(alpha, 10_000),
    claims.budget_alphas(alpha, len(rule.looks(10_000)), rule.final_share),
  )
  for share in (0.6, 0.5, 0.3, 0.1, 0.77):
    a_mix, rest = claims.split_alpha(alpha, share)
    assert Fraction(a_mix) + Fraction(rest) <= Fraction(alpha) and rest > 0
