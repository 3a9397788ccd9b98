"""Noise families: distributions (KS tests), scale conventions, names."""

import math

import jax
import numpy as np
import pytest
from scipy import stats as st

from rsjax import noise


@pytest.mark.parametrize(
    "family, dist",
    [
        (noise.Gaussian(), st.norm()),
        (noise.Laplace(), st.laplace()),
        (noise.Uniform(), st.uniform(loc=-1, scale=2)),
    ],
)
def test_unit_samples_follow_the_family(family, dist):
  z = np.asarray(family.sample(jax.random.key(0), (40_001,))).astype(np.float64)
  assert np.all(np.isfinite(z))
  assert st.kstest(z, dist.cdf).pvalue > 1e-3
  # Distinct keys give independent streams (no shared prefix).
  z2 = np.asarray(family.sample(jax.random.key(1), (40_001,)))
  assert abs(np.corrcoef(z[:40_000], z2[:40_000])[0, 1]) < 0.03


def test_gaussian_words_are_independent_within_a_sample():
  z = np.asarray(noise.standard_normal(jax.random.key(3), (100_000,)))
  # Neighbouring outputs come from the two words of one hash: no correlation.
  assert abs(np.corrcoef(z[0::2], z[1::2])[0, 1]) < 0.02
  assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02
  half = z.size // 2  # threefry hashes counter i with counter i + n/2
  assert abs(np.corrcoef(z[:half], z[half:2 * half])[0, 1]) < 0.02
  np.testing.assert_array_equal(z, np.asarray(noise.standard_normal(jax.random.key(3),
                                                                    (100_000,))))


def test_scale_from_std():
  assert noise.Gaussian().scale_from_std(0.5) == 0.5
  assert noise.Laplace().scale_from_std(0.5) == pytest.approx(0.5 / math.sqrt(2))
  assert noise.Uniform().scale_from_std(0.5) == pytest.approx(0.5 * math.sqrt(3))
  for fam in (noise.Gaussian(), noise.Laplace(), noise.Uniform()):
    z = np.asarray(fam.sample(jax.random.key(2), (50_000,))) * fam.scale_from_std(0.5)
    assert z.std() == pytest.approx(0.5, rel=0.03)


def test_get_noise():
  assert noise.get_noise(None) == noise.Gaussian()
  assert noise.get_noise("uniform_linf").norm == "linf"
  with pytest.raises(ValueError, match="noise"):
    noise.get_noise("cauchy")
  with pytest.raises(ValueError, match="norm"):
    noise.Uniform(norm="l2")
