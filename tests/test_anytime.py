"""Budgeted CERTIFY's anytime-valid rule (``rsjax.engine.anytime.Anytime``).

Validity is checked exactly, through the rule's own per-look decision
(``Decisions.decide``, which ``anytime_bounds`` applies): for every grid
threshold ``m_j``, ``anytime.exact_error``'s forward recursion over the count
distribution of the inputs still running, with ``p_A = m_j``, sums the
probability of stopping with a bound ``p_lower >= m_j`` (stopping and futility
included, and Clopper-Pearson at ``n_max``); it is at most alpha, the mixture's
part at most its share of alpha, and a rule with twice the test level fails the
same check. Monte Carlo through ``anytime_bounds``' own loop checks the recursion.
Then Monte Carlo just below each threshold at alpha = 0.05, and the real
engine on a linear classifier whose true radius is known.
"""

import dataclasses

import jax
import numpy as np
import pytest
import scipy.stats

import rsjax
from rsjax import claims, noise
from rsjax.engine import anytime, anytime_table
from rsjax.engine import budget as budgeted

GRID = (0.0, 0.25, 0.5, 0.75, 1.0)
SIGMA = 0.5  # thresholds 0.5, 0.69, 0.84, 0.93, 0.977: all within reach of N = 2000


def _check_decisions(table, j):
  """The decision's invariants at every count of every look, for level ``j``."""
  p = float(table.m[0, j])
  for k, n_k in enumerate(table.looks.tolist()):
    s = np.arange(n_k + 1)
    level, p_lower, stop = table.decide(s, k)
    assert np.array_equal(level >= j, p_lower >= p)  # the level is the bound's
    if k + 1 < len(table.looks):  # before n_max only the mixture certifies
      assert np.array_equal(level, table.level(s, k))
    else:  # every input stops by n_max
      assert stop.all()


@pytest.mark.parametrize(
  ("sigma", "n_max", "alpha", "share", "weight"),
  [
    (0.5, 2000, 0.001, 0.5, 0.0),
    (0.5, 2000, 0.05, 0.5, 0.5),
    (0.25, 5000, 0.001, 0.5, 0.5),
    (0.25, 5000, 0.05, 0.5, 0.0),
    (0.5, 2000, 0.05, 0.7, 0.9),
    (0.25, 5000, 0.001, 0.7, 0.5),
    (0.25, 5000, 0.001, 0.6, 0.99),
  ],
)
def test_exact_error_at_every_threshold(sigma, n_max, alpha, share, weight):
  rule = anytime.Anytime(grid=GRID, mixture_share=share, agree_weight=weight)
  table = anytime.anytime_decisions(rule, n_max=n_max, alpha=alpha, scales=[sigma])
  assert table.cp_alpha == pytest.approx((1 - share) * alpha, rel=1e-12)
  levels = [j for j in range(len(GRID)) if table.m[0, j] < 1.0]
  for j in levels:
    _check_decisions(table, j)
    mix, cp = anytime.exact_error(table, j)
    assert mix <= share * alpha and cp <= table.cp_alpha and mix + cp <= alpha, (j, mix, cp)
    if table.need[0, j] <= n_max:  # reachable: the check is not vacuous
      assert mix > 0.0 and cp > 0.0, (j, mix, cp)
  # The check can fail: the same rule with the mixture and Clopper-Pearson at alpha each.
  loose = anytime.anytime_decisions(rule, n_max=n_max, alpha=2 * alpha, scales=[sigma])
  assert max(sum(anytime.exact_error(loose, j)) for j in levels) > alpha
  # Clopper-Pearson at alpha, the mixture at its share: more than CP's share from CP alone.
  cp_loose = dataclasses.replace(table, cp_alpha=alpha)
  assert max(anytime.exact_error(cp_loose, j)[1] for j in levels) > table.cp_alpha


@pytest.mark.parametrize("weight", [0.0, 0.5])
def test_thresholds_are_the_mixture_crossing(weight):
  looks = (100, 250, 1000)
  m, a = 0.8, 0.01
  c = claims.mixture_thresholds(m, a, looks, weight)
  for t, ct in zip(looks, c, strict=True):
    assert claims.mixture_log_wealth(ct, t, m, weight) >= np.log(1 / a)
    assert claims.mixture_log_wealth(ct - 1, t, m, weight) < np.log(1 / a)
  assert claims.mixture_thresholds(1.5, a, looks, weight).tolist() == [101, 251, 1001]
  with pytest.raises(ValueError, match="agree_weight"):
    claims.mixture_thresholds(m, a, looks, 1.0)


def test_agree_weight_is_the_likelihood_ratio_of_all_agree():
  # The weight's part, w m^-t on the all-agree count, in closed form; the KT part scaled by 1 - w.
  m, w, t = 0.99, 0.5, np.arange(1, 2000)
  both = claims.mixture_log_wealth(t, t, m, w)
  kt = claims.mixture_log_wealth(t, t, m)
  np.testing.assert_allclose(both, np.logaddexp(np.log(w) - t * np.log(m), np.log1p(-w) + kt),
                             rtol=1e-12)  # fmt: skip
  np.testing.assert_allclose(claims.mixture_log_wealth(t - 1, t, m, w),
                             np.log1p(-w) + claims.mixture_log_wealth(t - 1, t, m), rtol=1e-12)  # fmt: skip
  # An input whose samples all agree crosses sooner with the weight, any other a little later.
  a, looks = 0.0006, tuple(range(100, 20000, 10))
  c0, c5 = claims.mixture_thresholds(m, a, looks), claims.mixture_thresholds(m, a, looks, w)
  first = lambda c: looks[int(np.argmax(np.asarray(c) <= np.asarray(looks)))]  # noqa: E731
  assert first(c5) < first(c0)
  assert np.all(c5[np.asarray(c5) < np.asarray(looks)] >= c0[np.asarray(c5) < np.asarray(looks)])
  assert claims.nested_level(np.array([5, 5, 0]), np.array([[1, 9, 2], [1, 2, 9], [1, 1, 1]]))\
    .tolist() == [0, 1, -1]  # fmt: skip


def _simulate(p, reps, *, rule, alpha, n_max, seed, sigma=SIGMA):
  rng = np.random.default_rng(seed)

  def count_fn(active, start, stop):
    return rng.binomial(stop - start, p, size=len(active))

  _, used, p_lower = anytime.anytime_bounds(
    count_fn, reps, n_max=n_max, alpha=alpha, budget=rule, scale=sigma
  )
  return budgeted.grid_level(p_lower, rule.grid, scale=sigma), used


@pytest.mark.parametrize(("sigma", "n_max"), [(0.5, 2000), (0.25, 5000)])
def test_monte_carlo_just_below_each_threshold(sigma, n_max):
  # anytime_bounds' own loop on simulated counts: wrong at most at rate alpha, and at the
  # rate the recursion over counts computes (a check of the recursion against the loop).
  alpha, reps, rule = 0.05, 10000, anytime.Anytime(grid=GRID)
  table = anytime.anytime_decisions(rule, n_max=n_max, alpha=alpha, scales=[sigma])
  for j, m in enumerate(table.m[0]):
    if not m < 1.0:
      continue
    p = float(np.nextafter(m, 0.0))
    lvl, used = _simulate(p, reps, rule=rule, alpha=alpha, n_max=n_max, seed=j, sigma=sigma)
    wrong, exact = float(np.mean(lvl >= j)), sum(anytime.exact_error(table, j))
    assert wrong <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / reps), (j, wrong)
    assert abs(wrong - exact) <= 4 * np.sqrt(exact * (1 - exact) / reps) + 1e-4, (j, wrong, exact)
    assert used.min() >= rule.first and used.max() <= n_max


def test_clear_inputs_stop_early_and_keep_fixed_n_levels():
  alpha, n_max, rule = 0.001, 20000, anytime.Anytime(grid=GRID)
  lvl, used = _simulate(0.999, 300, rule=rule, alpha=alpha, n_max=n_max, seed=1)
  assert np.all(lvl == 4) and used.mean() < 0.1 * n_max  # top of the grid, early
  lvl, used = _simulate(0.3, 300, rule=rule, alpha=alpha, n_max=n_max, seed=2)
  assert np.all(lvl == -1) and used.mean() < 0.05 * n_max  # abstain is certain
  # Just above level 2 (m = 0.841): certified at level 2 as fixed N would.
  lvl, used = _simulate(0.87, 300, rule=rule, alpha=alpha, n_max=n_max, seed=3)
  assert np.mean(lvl == 2) > 0.95 and used.mean() < 0.5 * n_max


def _linear(dim=16, num_classes=2):
  w = np.zeros((dim, num_classes), np.float32)
  w[:, 1] = 1.0 / np.sqrt(dim)
  return lambda params, x: x.reshape(x.shape[0], -1) @ params, w


def test_engine_rounds_and_linear_soundness():
  apply_fn, w = _linear()
  margins = np.array([-0.6, 0.05, 0.3, 1.5, 3.0])
  x = np.zeros((5, 16), np.float32) + margins[:, None].astype(np.float32) / 4.0
  key, ids, n_max = jax.random.key(5), np.array([3, 11, 7, 0, 42]), 8000
  rule = anytime.Anytime(grid=GRID)
  kw = dict(sigma=1.0, num_classes=2, n0=100, alpha=0.001, ids=ids)
  cert = rsjax.certify(key, apply_fn, w, x, n=n_max, batch_size=1000, budget=rule, **kw)
  assert isinstance(cert, budgeted.BudgetedCertificate)
  assert np.all(cert.counts.sum(1) == cert.num_samples)
  assert set(cert.num_samples.tolist()) <= set(rule.looks(n_max).tolist())
  k_est, j = jax.random.fold_in(key, 1), np.arange(n_max)
  for i in range(5):
    eps = rsjax.sample_noise(noise.get_noise(None), k_est, int(ids[i]), j, (16,))
    pred = np.asarray(apply_fn(w, x[i] + eps)).argmax(1)[: cert.num_samples[i]]
    np.testing.assert_array_equal(np.bincount(pred, minlength=2), cert.counts[i])
  pred_ok = cert.prediction == (margins > 0)
  assert np.all(cert.radius[pred_ok] <= np.abs(margins[pred_ok]))
  assert np.all(cert.radius[~pred_ok] == 0) and cert.prediction[4] == 1
  assert cert.radius[4] >= 1.0 and cert.num_samples[4] < 1000
  assert "anytime-valid" in cert.guarantee
  # The same certificate whatever the batch size, the rounds, the order or the devices.
  perm = np.array([4, 2, 0, 3, 1])
  again = rsjax.certify(
    key, apply_fn, w, x[perm], n=n_max, batch_size=384, devices=1,
    budget=anytime.Anytime(grid=GRID, round_ratio=3.0), **{**kw, "ids": ids[perm]},
  )  # fmt: skip
  np.testing.assert_array_equal(again.num_samples, cert.num_samples[perm])
  np.testing.assert_array_equal(again.counts, cert.counts[perm])
  np.testing.assert_array_equal(again.radius, cert.radius[perm])


def test_many_linear_inputs_are_sound():
  # 200 inputs just above the grid radii: a radius beyond the true distance (or a wrong
  # class) at most at the rate alpha allows (alpha = 0.01: 2 expected, 3 sd above is 6).
  apply_fn, w = _linear()
  rng = np.random.default_rng(0)
  margins = rng.choice([0.26, 0.51, 0.76, 1.01], 200) * rng.choice([1, 1, 1, -1], 200)
  x = np.zeros((200, 16), np.float32) + margins[:, None].astype(np.float32) / 4.0
  cert = rsjax.certify(
    0, apply_fn, w, x, sigma=1.0, num_classes=2, n0=100, n=4000, alpha=0.01, batch_size=500,
    budget=anytime.Anytime(grid=GRID),
  )  # fmt: skip
  truth = (margins > 0).astype(int)
  wrong = np.where(cert.prediction == truth, cert.radius > np.abs(margins), cert.prediction >= 0)
  assert wrong.sum() <= 6, wrong.sum()
  assert np.mean(cert.radius >= 0.25) > 0.5  # and it certifies


def test_argument_errors():
  for bad in ({"first": 0}, {"ratio": 1.0}, {"stop_alpha": 0.0}, {"first": True},
              {"mixture_share": 0.0}, {"mixture_share": 1.0},
              {"agree_weight": 1.0}, {"agree_weight": -0.1}):  # fmt: skip
    with pytest.raises(ValueError):
      anytime.Anytime(grid=GRID, **bad)
  with pytest.raises(ValueError, match="grid"):
    anytime.Anytime(grid=(0.5, 0.1))
  apply_fn, w = _linear()
  with pytest.raises(ValueError, match="multiclass"):
    rsjax.certify(
      0, apply_fn, w, np.zeros((2, 16), np.float32), sigma=1.0, num_classes=2,
      budget=anytime.Anytime(grid=GRID), multiclass=True,
    )  # fmt: skip


def test_mixture_crossing_is_within_its_share_at_every_p_below_each_threshold():
  """The shipped setting (grid 0 to 1.5 by 0.25, sigma 0.25, N 100,000, alpha 0.001, the
  rule's defaults: share 0.6, agree weight 1/2, looks at ratio 1.01): for every level ``j``
  and every ``p_A <= m_j``, the probability that level ``j``'s mixture test ever crosses,
  run to ``N`` over every look without stopping, is at most the mixture's share of alpha.

  That event contains every way the rule can report level ``j`` by the mixture (the level
  needs its own test to reject at the look it stops at, and stopping only removes looks),
  so it bounds the mixture's part of the error at every ``p_A``, not only at ``p_A = m_j``
  where ``exact_error`` computes it. Checking ``p = m_j`` suffices, by monotonicity:
  couple every ``p`` on one path of uniforms ``U_1, U_2, ...`` with sample ``t`` a success
  when ``U_t < p``. For ``p <= p'`` every count ``S(n) = #{t <= n: U_t < p}`` is at most
  its count at ``p'``, and the crossing event ``{exists k: S(n_k) >= c(n_k)}`` is an
  up-set (a larger count at every look crosses whenever a smaller one does), so the event
  at ``p`` is contained in the event at ``p'`` on every path: ``P_p(cross) <=
  P_p'(cross)``. The recursion (``anytime_table.crossing_probability``, with the mass it
  leaves outside its windows counted as crossed) checks it numerically on 20 ``p`` per
  level, from ``m_j / 2`` to ``m_j`` itself: each within the share, and nondecreasing up
  to the float64 FFT noise (about 1e-14).
  """
  grid = tuple(float(r) for r in np.arange(0, 1.51, 0.25))
  rule = anytime.Anytime(grid=grid)
  alpha, n_max = 0.001, 100_000
  table = anytime.anytime_decisions(rule, n_max=n_max, alpha=alpha, scales=[0.25])
  a_mix = claims.split_alpha(alpha, rule.mixture_share)[0]
  assert len(table.looks) == 654 and a_mix == pytest.approx(0.6 * alpha, rel=1e-15)
  reach = [j for j in range(len(rule.grid)) if np.any(table.c[0, j] <= table.looks)]
  assert reach == [0, 1, 2, 3]  # no count ever crosses the levels above: probability 0
  u = np.geomspace(1e-9, 0.5, 18)[::-1]
  ps = np.stack([np.r_[m * (1 - u), np.nextafter(m, 0.0), m] for m in table.m[0, reach]])
  c = np.repeat(table.c[0, reach], ps.shape[1], axis=0)
  crossed, outside = anytime_table.crossing_probability(table.looks, c, ps.reshape(-1))
  crossed, outside = crossed.reshape(ps.shape), outside.reshape(ps.shape)
  assert np.all(crossed + outside <= a_mix) and outside.max() < 1e-12
  assert np.all(np.diff(crossed, axis=1) >= -1e-13)
  # 0.068, 0.152, 0.540, 0.525 alpha at the thresholds (0.6 alpha allowed): stopping and
  # Clopper-Pearson's part bring the rule's whole error at level 3 to 0.86 alpha.
  np.testing.assert_allclose(crossed[:, -1] / alpha, [0.0677, 0.1520, 0.5402, 0.5249], atol=2e-4)


@pytest.mark.parametrize(("sigma", "n_max", "weight"), [(0.5, 2000, 0.5), (0.25, 5000, 0.0)])
def test_crossing_probability_against_the_full_recursion(sigma, n_max, weight):
  # The windowed recursion equals the recursion over every count, and bounds the mixture
  # part of the rule's exact error at the threshold (stopping only removes looks).
  rule = anytime.Anytime(grid=GRID, agree_weight=weight)
  table = anytime.anytime_decisions(rule, n_max=n_max, alpha=0.05, scales=[sigma])
  for j in range(len(GRID)):
    m, c = float(table.m[0, j]), table.c[0, j]
    if not m < 1.0:
      continue
    dist, n, full = np.ones(1), 0, 0.0
    for n_k, c_k in zip(table.looks.tolist(), c.tolist(), strict=True):
      dist = np.convolve(dist, scipy.stats.binom.pmf(np.arange(n_k - n + 1), n_k - n, m))
      n = n_k
      full += dist[c_k:].sum()
      dist[c_k:] = 0.0
    got, outside = anytime_table.crossing_probability(table.looks, c, [m])
    assert abs(got[0] - full) < 1e-12 and outside[0] < 1e-10, (j, got, full, outside)
    assert got[0] + 1e-12 >= anytime.exact_error(table, j)[0]
