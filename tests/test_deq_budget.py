"""Tests of the SRS mismatch budget (rsjax.srs.max_certifiable_radius and friends)."""

import numpy as np
import pytest
from scipy import stats as st

from rsjax import srs, stats


@pytest.mark.parametrize("correction", ["paper", "authors_code"])
def test_cap_is_what_the_certificate_gives_when_all_samples_agree(correction):
  for n, m, alpha, sigma in (
    (2000, 200, 0.001, 0.5),
    (10_000, 400, 0.001, 0.25),
    (500, 37, 0.05, 1.0),
  ):
    c1 = np.array([[n, 0, 0]])
    c0 = np.array([[100, 0, 0]])
    labels = np.zeros((1, m), int)
    cert = srs.srs_certificate(
      c0, c1, labels, labels, n=n, alpha=alpha, scale=sigma, correction=correction
    )
    assert cert.prediction[0] == 0
    np.testing.assert_allclose(
      cert.p_lower[0], srs.mismatch_cap(n, m, alpha, correction), rtol=1e-12
    )
    np.testing.assert_allclose(
      cert.radius[0], srs.max_certifiable_radius(n, m, alpha, sigma, correction), rtol=1e-12
    )


def test_no_certificate_exceeds_the_cap():
  rng = np.random.default_rng(0)
  n, m, alpha = 1000, 120, 0.01
  n_a = rng.integers(0, n + 1, 2000)
  m_a = rng.integers(0, m + 1, 2000)
  k = (rng.random(2000) * (m_a + 1)).astype(int).clip(0, m_a)
  p, _ = srs.srs_p_lower(n_a, n, k, m_a, alpha)
  assert np.all(p <= srs.mismatch_cap(n, m, alpha) + 1e-12)


def test_cap_grows_with_m_towards_standard_rs():
  n, alpha, sigma = 10_000, 0.001, 0.5
  radii = [srs.max_certifiable_radius(n, m, alpha, sigma) for m in (50, 100, 400, 2000, 10**6)]
  assert np.all(np.diff(radii) > 0)
  standard = float(stats.max_radius(n, alpha / 2, sigma))  # each stage uses alpha / 2
  assert radii[-1] < standard and radii[-1] > standard - 0.02
  # m = 400 checks: the paper form caps p_lower at LCB(N r, N, alpha/2), r = (alpha/2)^(1/m).
  r = (alpha / 2) ** (1 / 400)
  cap = st.beta.ppf(alpha / 2, n * r, n - n * r + 1)
  np.testing.assert_allclose(srs.mismatch_cap(n, 400, alpha), cap, rtol=1e-12)
  np.testing.assert_allclose(radii[2], sigma * st.norm.ppf(cap), rtol=1e-12)
  # The authors' code form is never below the paper form.
  assert srs.max_certifiable_radius(n, 400, alpha, sigma, "authors_code") >= radii[2]
  # Too few checks to certify anything: (alpha/2)^(1/m) <= 1/2.
  assert srs.max_certifiable_radius(n, 10, alpha, sigma) == 0.0


def test_min_check_samples_inverts_the_cap():
  n, alpha = 10_000, 0.001
  for sigma, target in ((0.5, 1.0), (0.25, 0.5), (0.5, 0.3), (1.0, 2.5)):
    m = srs.min_check_samples(target, n, alpha, sigma)
    assert srs.max_certifiable_radius(n, m, alpha, sigma) >= target
    assert srs.max_certifiable_radius(n, m - 1, alpha, sigma) < target
  with pytest.raises(ValueError, match="out of reach"):
    srs.min_check_samples(1.6, n, alpha, 0.5)  # standard RS itself stops at 1.585
  with pytest.raises(ValueError, match="radius"):
    srs.min_check_samples(-0.1, n, alpha, 0.5)
  m0 = srs.min_check_samples(0.0, n, alpha, 0.5)  # any certificate: the cap above 1/2
  assert srs.mismatch_cap(n, m0, alpha) > 0.5 >= srs.mismatch_cap(n, m0 - 1, alpha)
  with pytest.raises(ValueError, match="sigma"):
    srs.max_certifiable_radius(n, 400, alpha, 0.0)
