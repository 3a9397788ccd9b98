"""Host statistics: Clopper-Pearson definition and coverage, tests, radii."""

import math
import warnings

import numpy as np
import pytest
from scipy import stats as st

from rsjax import stats


def test_clopper_pearson_equals_beta_quantiles():
  k = np.array([0, 1, 5, 50, 99, 100])
  n = 100
  alpha = 0.001
  lo = stats.clopper_pearson_lower(k, n, alpha)
  hi = stats.clopper_pearson_upper(k, n, alpha)
  for ki, lo_i, hi_i in zip(k, lo, hi, strict=True):
    want_lo = 0.0 if ki == 0 else st.beta.ppf(alpha, ki, n - ki + 1)
    want_hi = 1.0 if ki == n else st.beta.ppf(1 - alpha, ki + 1, n - ki)
    assert lo_i == pytest.approx(want_lo, rel=1e-12, abs=1e-300)
    assert hi_i == pytest.approx(want_hi, rel=1e-12)


def test_clopper_pearson_matches_scipy_exact_interval():
  # The one-sided bound at alpha is the lower end of the two-sided exact interval at 1 - 2 alpha.
  for k, n in [(3, 10), (990, 1000), (99_950, 100_000)]:
    ci = st.binomtest(k, n).proportion_ci(confidence_level=1 - 2 * 0.001, method="exact")
    assert stats.clopper_pearson_lower(k, n, 0.001) == pytest.approx(ci.low, rel=1e-9)
    assert stats.clopper_pearson_upper(k, n, 0.001) == pytest.approx(ci.high, rel=1e-9)


@pytest.mark.parametrize("p", [0.05, 0.5, 0.8, 0.97])
def test_clopper_pearson_coverage_by_simulation(p):
  rng = np.random.default_rng(0)
  alpha, n, trials = 0.01, 200, 200_000
  k = rng.binomial(n, p, size=trials)
  lo = stats.clopper_pearson_lower(k, n, alpha)
  hi = stats.clopper_pearson_upper(k, n, alpha)
  slack = 4 * math.sqrt(alpha * (1 - alpha) / trials)
  assert np.mean(lo > p) <= alpha + slack
  assert np.mean(hi < p) <= alpha + slack
  # ...and not vacuous: the bound is within a few standard errors of p.
  assert np.mean(p - lo) < 4 * math.sqrt(p * (1 - p) / n) + 0.02


def test_binomial_test_half_matches_scipy():
  for n1, n2 in [(10, 0), (60, 40), (50, 50), (520, 480), (0, 7), (3, 5)]:
    want = st.binomtest(n1, n1 + n2, 0.5).pvalue
    assert stats.binomial_test_half(n1, n2) == pytest.approx(want, rel=1e-9)


def test_gaussian_radius_and_saturation():
  assert stats.gaussian_radius(0.5, 1.0) == 0.0
  assert stats.gaussian_radius(0.4, 1.0) == 0.0
  assert stats.gaussian_radius(st.norm.cdf(1.5), 0.5) == pytest.approx(0.75)
  # The reference's saturation: N=1e5, alpha=1e-3 -> 3.81 sigma.
  assert stats.max_radius(100_000, 0.001, 1.0) == pytest.approx(3.81, abs=5e-3)
  assert stats.max_probability_lower(100_000, 0.001) == pytest.approx(0.99993, abs=1e-5)
  assert stats.clopper_pearson_lower(100_000, 100_000, 0.001) == pytest.approx(
    0.001 ** (1 / 100_000)
  )


def test_multiclass_radius():
  p_a, p_b = stats.multiclass_bounds(np.array([900]), np.array([[80, 20]]), 1000, 0.001)
  assert p_a[0] == pytest.approx(stats.clopper_pearson_lower(900, 1000, 0.0005))
  assert p_b[0] == pytest.approx(stats.clopper_pearson_upper(80, 1000, 0.0005 / 2))
  r = stats.multiclass_radius(p_a, p_b, 0.5)
  assert r[0] == pytest.approx(0.25 * (st.norm.ppf(p_a[0]) - st.norm.ppf(p_b[0])))
  # With p_B = 1 - p_A it equals the binary radius.
  assert stats.multiclass_radius(0.9, 0.1, 1.0) == pytest.approx(st.norm.ppf(0.9))
  assert stats.multiclass_radius(0.3, 0.4, 1.0) == 0.0


def test_laplace_uniform_radii_closed_forms():
  lam = 0.7
  # 1-D threshold classifier at distance t: exact p_A gives exactly t.
  for t in [0.05, 0.3, 0.6]:
    p_lap = 1 - 0.5 * math.exp(-t / lam)
    assert stats.laplace_l1_radius(p_lap, lam) == pytest.approx(t)
    p_uni = 0.5 * (1 + t / lam)
    assert stats.uniform_l1_radius(p_uni, lam) == pytest.approx(t)
  d = 10
  r = stats.uniform_linf_radius(0.8, lam, d)
  assert r == pytest.approx(2 * lam * (1 - (0.7) ** (1 / d)))
  assert stats.laplace_l1_radius(0.5, lam) == 0.0


def test_sample_size_warning():
  assert stats.min_samples_to_certify(0.001) == 10
  with pytest.warns(UserWarning, match="never certify"):
    assert not stats.check_sample_size(9, 0.001)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert stats.check_sample_size(10, 0.001)
  # 10 all-correct samples do give a bound above 1/2, 9 do not.
  assert stats.clopper_pearson_lower(10, 10, 0.001) > 0.5
  assert stats.clopper_pearson_lower(9, 9, 0.001) < 0.5


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, 1.5, float("nan")])
def test_bad_alpha(alpha):
  with pytest.raises(ValueError, match="alpha"):
    stats.clopper_pearson_lower(5, 10, alpha)
