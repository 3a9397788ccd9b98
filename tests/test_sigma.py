"""rsjax.noise.sigma: one protocol, ``evaluate(x) -> SigmaValues``, for every method's sigma source."""

import numpy as np
import pytest

import rsjax
from rsjax import ddrs, idrs, ucan


def _linear_apply(params, x):
  s = x.reshape(x.shape[0], -1) @ params
  return np.stack([-s, s], axis=1)


def test_sigma_values_live_in_the_core_and_idrs_reexports_them():
  assert idrs.SigmaValues is rsjax.SigmaValues is rsjax.noise.sigma.SigmaValues
  v = rsjax.SigmaValues(np.ones(2, np.float32), 0.0, np.zeros(2))  # the IDRS positional form
  assert v.mu is None and v._fields == ("sigma", "rate", "slack", "mu")


def test_every_method_source_follows_the_protocol():
  x = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
  sources = {
    "idrs constant": idrs.ConstantSigma(0.25),
    "idrs knn": idrs.KnnSigma(x + 0.5, 0.25, 0.1, k=2, m=1.0),
    "ddrs": ddrs.OptimizedSigma(0, lambda p, z: z[:, :2] * p, 1.0, 0.25, ddrs.SigmaAscent(steps=1)),
    "ucan frozen": ucan.FrozenNoise(np.full(4, 0.5, np.float32), mu=0.1),
    "ucan input": ucan.InputDependentNoise(lambda z: (None, 0.1 + z)),
  }
  rates = {}
  for name, source in sources.items():
    assert isinstance(source, rsjax.SigmaSource), name
    v = source.evaluate(x)
    assert isinstance(v, rsjax.SigmaValues) and v.slack.shape == (3,), name
    assert v.sigma.shape in ((3,), x.shape) and v.sigma.dtype == np.float32, name
    rates[name] = v.rate
  # IDRS designs as before: [B] sigma, no mu, their rate (with the rounding margin).
  const = sources["idrs constant"].evaluate(x)
  np.testing.assert_array_equal(const.sigma, np.float32(0.25))
  assert const.rate == 0.0 and const.mu is None and np.all(const.slack == 0)
  knn = sources["idrs knn"].evaluate(x)
  assert knn.mu is None and 0.1 < knn.rate < 0.1 * (1 + 1e-5) and np.all(knn.slack > 0)
  frozen = sources["ucan frozen"].evaluate(x)
  np.testing.assert_array_equal(frozen.mu, np.full(x.shape, 0.1, np.float32))
  np.testing.assert_array_equal(sources["ucan input"].evaluate(x).sigma, 0.1 + x)
  assert rates == {
    "idrs constant": 0.0,
    "idrs knn": knn.rate,
    "ddrs": np.inf,
    "ucan frozen": 0.0,
    "ucan input": np.inf,
  }


def test_idrs_certify_refuses_what_it_cannot_certify():
  x = np.zeros((2, 4), np.float32)
  kw = dict(num_classes=2, n0=10, n=100)
  with pytest.raises(ValueError, match="rate inf"):
    idrs.certify(
      0,
      _linear_apply,
      np.ones(4),
      x,
      design=ucan.InputDependentNoise(lambda z: (None, 0.5)),
      **kw,
    )
  with pytest.raises(ValueError, match="zero-mean"):
    idrs.certify(0, _linear_apply, np.ones(4), x, design=ucan.FrozenNoise(0.5, mu=0.1), **kw)
