"""Dual randomized smoothing (rsjax.dual): its certificate against exact radii.

The setting of the paper's theorem where every radius is known: linear experts and a linear
sigma estimator in two dimensions. Under Gaussian noise the smoothed linear classifier is
the classifier itself and its exact radius is the distance to its hyperplane; so the
estimator's smoothed choice G changes exactly on its hyperplane, and a row's claim (G
constant and F_{k*} constant on the ball) is false when its radius passes either distance.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats as sps

from rsjax import dual

SIGMAS = (0.25, 0.5)
SIGMA_G = 0.25
# Estimator: index 1 (sigma 0.5) where x . U > T. Experts: class 1 where x . W_k + B_k > 0.
U, T = np.array([1.0, 0.0]), 0.0
W = (np.array([0.6, 0.8]), np.array([0.0, 1.0]))
B = (0.1, -0.2)


def _linear(w, b):
  w = jnp.asarray(w, jnp.float32)

  def apply(params, x):
    s = x.reshape(x.shape[0], -1) @ w + b
    return jnp.stack([-s, s], axis=-1)

  return apply


ESTIMATOR = _linear(U, -T)
EXPERTS = [(_linear(w, b), None) for w, b in zip(W, B, strict=True)]


def _exact(x):
  """The true smoothed choice and its exact radius; each expert's class and exact radius."""
  m_g = x @ U - T
  m_f = np.stack([x @ w + b for w, b in zip(W, B, strict=True)], axis=1)  # ||w|| = 1
  return (m_g > 0).astype(int), np.abs(m_g), (m_f > 0).astype(int), np.abs(m_f)


def _false_claims(cert, x):
  g_true, r_g, f_true, r_f = _exact(x)
  rows = np.flatnonzero(cert.prediction >= 0)
  k = cert.sigma_index[rows]
  wrong = (k != g_true[rows]) | (cert.prediction[rows] != f_true[rows, k])
  past = cert.radius[rows] > np.minimum(r_g[rows], r_f[rows, k])
  return rows, wrong | past


def _certify(x, **kw):
  return dual.certify(
    0, ESTIMATOR, None, EXPERTS, x, sigmas=SIGMAS, sigma_estimator=SIGMA_G, num_classes=2, **kw
  )


def test_radius_never_passes_the_exact_radii_nor_the_estimators_change():
  rng = np.random.default_rng(1)
  # Close to the estimator's hyperplane (x0 = 0), far from both experts': the estimator's
  # choice changes inside the experts' radii, so only R_g keeps the radius honest.
  x = np.stack([rng.uniform(-0.3, 0.3, 64), rng.uniform(2.0, 3.0, 64)], axis=1)
  cert = _certify(x, n0=64, n=4000, alpha=0.001, batch_size=512)
  rows, bad = _false_claims(cert, x)
  assert rows.size > 40 and not bad.any()
  _, r_g, _, r_f = _exact(x)
  assert np.all(cert.radius <= r_g + 1e-12)
  # The test has teeth: the chosen expert's radius alone passes the estimator's change.
  assert np.any(cert.classifier_radius[rows] > r_g[rows])
  # Both halves recorded; the row's radius is the smaller, its claim at alpha_1 + alpha_2.
  np.testing.assert_array_equal(
    cert.radius[rows], np.minimum(cert.estimator_radius, cert.classifier_radius)[rows]
  )
  assert cert.estimator_counts.sum(axis=1).tolist() == [4000] * len(x)


def test_estimator_abstains_row_abstains():
  # On the estimator's hyperplane its smoothed choice is a coin toss: no certified choice.
  x = np.stack([np.zeros(16), np.linspace(2.0, 3.0, 16)], axis=1)
  cert = _certify(x, n0=64, n=2000, alpha=0.001, batch_size=512)
  assert np.all(cert.sigma_index[cert.estimator_p_lower <= 0.5] == -1)
  assert np.all(cert.prediction[cert.sigma_index == -1] == -1)
  assert np.all(cert.radius[cert.prediction == -1] == 0)
  assert (cert.sigma_index == -1).sum() >= 12


@pytest.mark.parametrize("alpha", [0.05])
def test_coverage_at_alpha(alpha):
  """The false-claim rate is at most alpha (with a binomial margin), the union bound's."""
  rng = np.random.default_rng(2)
  n_in = 1200
  # Inputs near both kinds of hyperplane, where the bounds are tight and claims can fail.
  x = rng.uniform(-0.4, 0.4, (n_in, 2))
  cert = _certify(x, n0=32, n=200, alpha=alpha, batch_size=1024)
  rows, bad = _false_claims(cert, x)
  assert rows.size > n_in // 2
  limit = sps.binom.ppf(0.999, n_in, alpha)
  assert bad.sum() <= limit, (bad.sum(), limit)
  # The test has teeth: the chosen classifier's radius alone (no estimator radius) fails it.
  broken = dataclasses.replace(cert, radius=cert.classifier_radius)
  assert _false_claims(broken, x)[1].sum() > limit


def test_bad_arguments():
  x = np.zeros((2, 2))
  with pytest.raises(ValueError, match="Gaussian noise only"):
    _certify(x, noise="laplace")
  with pytest.raises(ValueError, match="experts"):
    dual.certify(0, ESTIMATOR, None, EXPERTS[:1], x, sigmas=SIGMAS, sigma_estimator=0.25,
                 num_classes=2)  # fmt: skip
  with pytest.raises(ValueError, match="alpha_split"):
    _certify(x, alpha_split=1.0)
