"""The gamma switch of ``rsjax.recertify`` (issue 73, Ugare et al.'s Algorithm 3): rows whose
parent ``p_A_lower >= gamma`` are certified from scratch at ``alpha_1 + alpha_2``.

The level argument (``rsjax.cohen._recertify``'s docstring) is checked by Monte Carlo on
exact binomial counts, with the parent's true ``p_A`` on both sides of gamma; the engine's
switched rows are checked on the linear parent and child of ``tests/test_recertify.py``.
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
A1 = A2 = 0.025
GAMMA = 0.9


def _switched_false_rate(pa, zeta, rng, *, parent_n=2000, n=500, trials=40_000, replay=False):
  """The fraction of trials whose child claim is false under the switched procedure.

  The parent's class 1 has probability ``pa``; the child agrees with it except on a set of
  probability ``zeta`` inside class 1 (its class 1: ``pa - zeta``). ``replay``: the switched
  rows' samples are the first ``n`` of the parent's (the paper's replayed noise), not fresh.
  """
  child = pa - zeta
  first = rng.binomial(n, pa, trials)  # the parent's first n samples ...
  k_a = first + rng.binomial(parent_n - n, pa, trials)  # ... and the rest
  p_lower = stats.clopper_pearson_lower(k_a, parent_n, A1)
  switched = p_lower >= GAMMA
  # bound rows: the disagreement on fresh noise
  pred = np.where(p_lower >= 0.5, 1, -1)
  z = stats.clopper_pearson_upper(rng.binomial(n, zeta, trials), n, A2)
  b_pred, b_radius, _ = rc.child_bounds(pred, p_lower, None, z, SIGMA)
  # switched rows: from scratch at alpha_1 + alpha_2 (class 1 selected)
  if replay:  # the child's class-1 samples among the parent's first n (nested sets)
    k_c = first - rng.binomial(first, zeta / pa)
  else:
    k_c = rng.binomial(n, child, trials)
  s_lower = stats.clopper_pearson_lower(k_c, n, A1 + A2)
  s_radius = np.where(s_lower > 0.5, SIGMA * st.norm.ppf(np.clip(s_lower, 0.5, 1.0)), 0.0)
  radius = np.where(switched, s_radius, np.where(b_pred == 1, b_radius, 0.0))
  true_radius = SIGMA * st.norm.ppf(child)  # the smoothed child's exact radius
  return float(np.mean((radius > 0) & (radius > true_radius))), float(switched.mean())


@pytest.mark.parametrize("pa", [0.895, 0.9, 0.905, 0.92, 0.97])
@pytest.mark.parametrize("zeta", [0.0, 0.003])
def test_the_switch_keeps_the_level(pa, zeta):
  """At alpha_1 = alpha_2 = 0.025 the switched procedure's claim is false in at most 5% of
  the trials (binomial margin), the parent's p_A below, at and above gamma."""
  rng = np.random.default_rng(int(pa * 1000) + int(zeta * 1e4))
  trials = 40_000
  rate, share = _switched_false_rate(pa, zeta, rng, trials=trials)
  assert rate <= A1 + A2 + 3 * np.sqrt(0.05 * 0.95 / trials), (rate, share)


def test_the_switch_is_exercised():
  """The Monte Carlo above switches a real share of the rows near gamma (not a vacuous test)."""
  rng = np.random.default_rng(1)
  _, share = _switched_false_rate(0.92, 0.0, rng, trials=4000)
  assert 0.2 < share < 1.0


def _parent(x, *, n=20_000, alpha=0.001, multiclass=False):
  params = {"c": jnp.float32(0.0)}
  settings = rsjax.Sampling(n0=100, n=n, alpha=alpha, batch_size=2000)
  cert = rsjax.certify(jax.random.key(1), rc_linear, params, x, sigma=SIGMA, num_classes=2,
                       settings=settings, multiclass=multiclass)  # fmt: skip
  return rc.Parent.of(cert, rc_linear, params, settings, multiclass=multiclass)


def rc_linear(params, x):
  s = x[:, 0] - params["c"]
  return jnp.stack([-s, s], axis=-1)


def test_switched_rows_are_certified_from_scratch():
  """Rows with p_A_lower >= gamma draw no disagreement sample and get the from-scratch
  certificate at alpha_1 + alpha_2; the others keep the bound."""
  x0 = np.asarray([0.3, 1.6, 2.0], np.float32)  # p_A 0.73, 0.9993, 0.99997
  x = np.stack([x0, np.zeros_like(x0)], axis=1)
  parent = _parent(x)
  child = {"c": jnp.float32(0.01)}
  cert = rsjax.recertify(3, rc_linear, child, x, parent=parent, sigma=SIGMA, num_classes=2,
                         n=2000, n0=100, alpha=0.001, gamma=0.99)  # fmt: skip
  assert list(cert.switched) == [False, True, True]
  assert np.all(cert.counts[1:] == 0) and cert.counts[0].sum() == 2000
  assert np.all(cert.zeta[1:] == 0) and cert.zeta[0] > 0
  sw = cert.switched_cert
  assert sw is not None and len(sw) == 2
  k = np.asarray(sw.counts)[np.arange(2), 1]
  want = SIGMA * st.norm.ppf(stats.clopper_pearson_lower(k, 2000, 0.002))
  np.testing.assert_allclose(cert.radius[1:], want, rtol=1e-9)
  assert cert.row_fields(1)["fallback"] == rc.SWITCHED and cert.row_fields(0)["fallback"] == 0
  rec = cert.record_fields(2)
  assert rec["switched"]["p_lower"] == cert.p_lower[2] and "fallback" not in rec
  off = rsjax.recertify(3, rc_linear, child, x, parent=parent, sigma=SIGMA, num_classes=2,
                        n=2000, alpha=0.001)  # fmt: skip
  assert not np.any(off.switched) and np.all(off.counts.sum(axis=1) == 2000)
  # near p_A = 1 the from-scratch cap at 2,000 samples and alpha 0.002 beats the bound's
  assert cert.radius[2] > off.radius[2]


def test_multiclass_switched_rows_use_the_multiclass_certificate():
  """A multiclass parent's switched rows are Cohen's multiclass certificate at alpha_1 +
  alpha_2 (p_A at half of it), not the binary one."""
  x0 = np.asarray([0.3, 2.0], np.float32)
  x = np.stack([x0, np.zeros_like(x0)], axis=1)
  parent = _parent(x, multiclass=True)
  cert = rsjax.recertify(3, rc_linear, {"c": jnp.float32(0.01)}, x, parent=parent, sigma=SIGMA,
                         num_classes=2, n=2000, n0=100, alpha=0.001, gamma=0.99)  # fmt: skip
  assert list(cert.switched) == [False, True]
  k = int(np.asarray(cert.switched_cert.counts)[0, 1])
  pa = stats.clopper_pearson_lower(k, 2000, 0.001)  # half of alpha_1 + alpha_2
  assert cert.p_lower[1] == pytest.approx(pa, rel=1e-12)
  assert cert.parent_p_upper is not None and cert.prediction[1] == 1


@pytest.mark.parametrize("gamma", [0.5, 1.5, "0.9", True])
def test_gamma_out_of_range_is_refused(gamma):
  with pytest.raises(ValueError, match="gamma"):
    rsjax.recertify(0, rc_linear, {"c": jnp.float32(0.0)}, np.zeros((1, 2), np.float32),
                    parent=None, sigma=SIGMA, num_classes=2, gamma=gamma)  # fmt: skip


def test_switch_key_is_none_of_the_others():
  assert len({0, 1, 2, rc.DISAGREEMENT, rc.FALLBACK, rc.SWITCH}) == 6
  k = jax.random.key(7)
  a = jax.random.normal(jax.random.fold_in(k, rc.SWITCH), (8,))
  b = jax.random.normal(jax.random.fold_in(k, rc.FALLBACK), (8,))
  assert not np.any(np.asarray(a) == np.asarray(b))
