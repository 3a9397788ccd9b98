"""Soundness of incremental randomized smoothing (``rsjax.recertify``, issue 56).

Linear classifiers have exact smoothed probabilities under Gaussian noise: the parent
``f(x) = 1[x_0 > 0]`` and the child ``f'(x) = 1[x_0 > c]`` disagree exactly on
``0 < x_0 <= c``, so ``P(f(x + e) = 1) = Phi(x_0 / sigma)``, the disagreement is
``Phi(x_0 / sigma) - Phi((x_0 - c) / sigma)`` and the smoothed child's exact radius at
``x`` is ``x_0 - c`` (class 1 where ``x_0 > c``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats as st

import rsjax
from rsjax import stats
from rsjax.cohen import _recertify as rc

SIGMA = 0.5


def linear(params, x):
  s = x[:, 0] - params["c"]
  return jnp.stack([-s, s], axis=-1)


def flipped(params, x):
  return -linear(params, x)


def _inputs(x0):
  x0 = np.asarray(x0, np.float32)
  return np.stack([x0, np.zeros_like(x0)], axis=1)


def _parent(x, *, n0=100, n=20_000, alpha=0.001, multiclass=False):
  params = {"c": jnp.float32(0.0)}
  settings = rsjax.Sampling(n0=n0, n=n, alpha=alpha, batch_size=2000)
  cert = rsjax.certify(
    jax.random.key(1), linear, params, x, sigma=SIGMA, num_classes=2, settings=settings,
    multiclass=multiclass,
  )  # fmt: skip
  return rc.Parent.of(cert, linear, params, settings, multiclass=multiclass), cert


def test_linear_child_exact_disagreement_and_radii():
  x0 = np.array([0.3, 0.6, 0.9, 1.2, -0.8, 0.05])
  c = 0.2
  x = _inputs(x0)
  parent, pcert = _parent(x)
  child = {"c": jnp.float32(c)}
  cert = rsjax.recertify(
    jax.random.key(2), linear, child, x, parent=parent, sigma=SIGMA, num_classes=2,
    n=4000, alpha=0.001, batch_size=2000,
  )  # fmt: skip
  exact = st.norm.cdf((c - x0) / SIGMA) - st.norm.cdf(-x0 / SIGMA)  # P(0 < x_0 + e <= c)
  freq = cert.counts[:, 1] / 4000
  assert np.all(np.abs(freq - exact) < 5 * np.sqrt(exact * (1 - exact) / 4000) + 1e-3)
  assert np.all(cert.zeta >= freq)
  # Every certified radius is at most the smoothed child's exact one, and close to it.
  true_class = (x0 > c).astype(int)
  exact_radius = np.abs(x0 - c)
  done = cert.prediction != -1
  assert done.sum() >= 3
  assert np.all(cert.prediction[done] == true_class[done])
  assert np.all(cert.radius[done] <= exact_radius[done])
  # Where the child loses what it disagrees on (x_0 > c), the bound is tight up to sampling;
  # where it gains (x_0 < 0), p_A' >= p_A - zeta is loose by design.
  loses = done & (x0 > c)
  assert np.all(cert.radius[loses] > exact_radius[loses] - 0.1)
  # The child's bound is the parent's minus zeta: never above the parent's.
  assert np.all(cert.p_lower[done] <= pcert.p_lower[done])
  np.testing.assert_allclose(
    cert.radius[done], SIGMA * st.norm.ppf(pcert.p_lower[done] - cert.zeta[done]), rtol=1e-12
  )


def test_child_that_disagrees_everywhere_abstains():
  x = _inputs([0.3, 0.6, 0.9, 1.5, -1.5])
  for multiclass in (False, True):
    parent, pcert = _parent(x, multiclass=multiclass)
    assert np.all(pcert.prediction != -1)
    cert = rsjax.recertify(
      3, flipped, {"c": jnp.float32(0.0)}, x, parent=parent, sigma=SIGMA, num_classes=2,
      n=500, alpha=0.001,
    )  # fmt: skip
    assert np.all(cert.counts[:, 1] == 500)
    assert np.all(cert.zeta == 1.0)
    assert np.all(cert.prediction == -1) and np.all(cert.radius == 0.0)


def test_fallback_certifies_the_rows_the_bound_cannot():
  x = _inputs([0.9, 1.5, -1.5])
  parent, _ = _parent(x)
  cert = rsjax.recertify(
    3, flipped, {"c": jnp.float32(0.0)}, x, parent=parent, sigma=SIGMA, num_classes=2,
    n=500, alpha=0.001, fallback=True,
  )  # fmt: skip
  assert np.all(cert.fallback)
  # From scratch, the flipped child certifies the opposite class, within its exact radius.
  assert list(cert.prediction) == [0, 0, 1]
  assert np.all((cert.radius > 0) & (cert.radius <= np.abs([0.9, 1.5, 1.5])))
  rec = cert.record_fields(1)
  assert rec["fallback"]["p_lower"] == cert.p_lower[1]
  assert rc.stated_alpha(0.001, 0.001, True) == pytest.approx(0.003)


def _false_claims(pa, zeta, parent_n, n, alpha_1, alpha_2, trials, rng, *, naive=False):
  """The fraction of trials whose child claim is false, from counts drawn with the exact
  probabilities: the parent's class 1 has probability ``pa``, the child agrees on class 1
  except on a set of probability ``zeta`` inside it, so its class 1 has ``pa - zeta``."""
  k_a = rng.binomial(parent_n, pa, trials)
  k_d = rng.binomial(n, zeta, trials)
  p_lower = stats.clopper_pearson_lower(k_a, parent_n, alpha_1)
  pred = np.where(p_lower >= 0.5, 1, -1)
  z = k_d / n if naive else stats.clopper_pearson_upper(k_d, n, alpha_2)
  child_pred, radius, _ = rc.child_bounds(pred, p_lower, None, z, SIGMA)
  true_radius = SIGMA * st.norm.ppf(pa - zeta)  # the smoothed child's exact radius
  false = (child_pred == 1) & (radius > true_radius)
  return false.mean()


@pytest.mark.parametrize("pa,zeta", [(0.9, 0.05), (0.75, 0.2), (0.99, 0.01)])
def test_coverage_of_the_combined_bound(pa, zeta):
  """At alpha_1 = alpha_2 = 0.025 (total 0.05), the child's claim is false in at most 5%
  of the trials (binomial margin); the same bound with the disagreement's point estimate
  instead of its upper bound is not sound (the test has power)."""
  rng = np.random.default_rng(0)
  trials = 40_000
  rate = _false_claims(pa, zeta, 100_000, 1000, 0.025, 0.025, trials, rng)
  margin = 3 * np.sqrt(0.05 * 0.95 / trials)
  assert rate <= 0.05 + margin
  naive = _false_claims(pa, zeta, 100_000, 1000, 0.025, 0.025, trials, rng, naive=True)
  assert naive > 0.05 + margin


def test_coverage_with_the_engine():
  """The engine's counts, 200 trials of 8 inputs: no more false claims than alpha allows."""
  x0 = np.full(8, 0.4)
  x = _inputs(x0)
  c, alpha = 0.1, 0.05
  false = 0
  settings = rsjax.Sampling(n0=50, n=2000, alpha=alpha / 2, batch_size=2000)
  for t in range(25):
    ids = np.arange(8) + 8 * t
    cert = rsjax.certify(t, linear, {"c": jnp.float32(0.0)}, x, sigma=SIGMA, num_classes=2,
                         settings=settings, ids=ids)  # fmt: skip
    parent = rc.Parent.of(cert, linear, {"c": jnp.float32(0.0)}, settings, ids=ids)
    child = rsjax.recertify(10_000 + t, linear, {"c": jnp.float32(c)}, x, parent=parent,
                            sigma=SIGMA, num_classes=2, n=500, alpha=alpha / 2, ids=ids)  # fmt: skip
    false += int(np.sum((child.prediction == 1) & (child.radius > x0 - c)))
    false += int(np.sum(child.prediction == 0))
  assert false <= st.binom.ppf(0.999, 200, alpha)


def test_disagreement_keys_are_not_the_parents():
  """The disagreement pass's noise is none of a certify run's passes, on the same key."""
  k = jax.random.key(7)
  shape = (2,)
  noise = rsjax.noise.get_noise(None)
  draws = {
    p: np.asarray(rsjax.sample_noise(noise, jax.random.fold_in(k, p), 5, jnp.arange(64), shape))
    for p in (0, 1, 2, rc.DISAGREEMENT, rc.FALLBACK)
  }
  for a in draws:
    for b in draws:
      if a != b:
        assert not np.any(np.all(draws[a] == draws[b], axis=-1))


def test_parent_rows_by_index():
  parent = rc.Parent(linear, {}, rsjax.Sampling(), np.array([5, 2, 9]), np.array([1, 0, -1]),
                     np.array([0.9, 0.8, 0.4]))  # fmt: skip
  pred, p, up = parent.rows(np.array([9, 5]))
  assert list(pred) == [-1, 1] and list(p) == [0.4, 0.9] and up is None
  with pytest.raises(ValueError, match="no row of input 3"):
    parent.rows(np.array([3]))
