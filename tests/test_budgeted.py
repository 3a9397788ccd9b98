"""Budgeted CERTIFY: coverage under data-dependent stopping, and the real engine.

The coverage test runs the same host code (``sequential_bounds``: looks, bounds,
stopping rule) on simulated binomial counts with known p_A, many repetitions
per p_A, including p_A exactly at a grid level and just below it (where a
stopping rule that re-tests at full alpha fails first). A deliberately unsound
variant (full alpha at every look) shows the test can fail.
"""

import jax
import numpy as np
import pytest
from scipy import stats as st

import rsjax
from rsjax import noise
from rsjax.engine import budget as budgeted

GRID = (0.0, 0.25, 0.5, 0.75, 1.0)


def _simulate(p, reps, *, budget, alpha, n_max, seed):
  """Certified grid levels of ``reps`` simulated inputs with top-class probability ``p``."""
  rng = np.random.default_rng(seed)

  def count_fn(active, start, stop):
    return rng.binomial(stop - start, p, size=len(active))

  _, used, p_lower = budgeted.sequential_bounds(
    count_fn, reps, n_max=n_max, alpha=alpha, budget=budget
  )
  return budgeted.grid_level(p_lower, budget.grid), used


class _FullAlphaEveryLook(budgeted.Budget):
  """Unsound on purpose: every look tested at the full alpha (no split)."""

  def alphas(self, alpha, n_max):
    return np.full(len(self.looks(n_max)), alpha)


def _boundary_ps():
  ps = []
  for r in GRID[1:4]:
    p = float(st.norm.cdf(r))  # sigma = 1: the radius of p is exactly r
    ps += [p, float(np.nextafter(p, 0.0))]
  return ps + [0.5, float(np.nextafter(0.5, 0.0)), 0.9]


@pytest.mark.parametrize("p", _boundary_ps())
def test_coverage_at_grid_levels(p):
  alpha, reps, n_max = 0.05, 20_000, 4000
  budget = budgeted.Budget(grid=GRID, first=100, ratio=2.0)
  true_level = int(budgeted.grid_level(p, GRID))
  level, used = _simulate(p, reps, budget=budget, alpha=alpha, n_max=n_max, seed=1)
  failures = int(np.sum(level > true_level))
  # Over-certification rate <= alpha within its binomial CI (one-sided, 99.9%).
  assert failures <= st.binom.ppf(0.999, reps, alpha), (p, failures / reps)
  assert used.max() <= n_max and used.min() >= 100


def test_coverage_test_can_fail():
  # p just below the 0.5 level: the unsplit rule over-certifies well above alpha.
  alpha, reps, n_max = 0.05, 20_000, 4000
  p = float(np.nextafter(st.norm.cdf(0.5), 0.0))
  bad = _FullAlphaEveryLook(grid=GRID, first=100, ratio=2.0)
  level, _ = _simulate(p, reps, budget=bad, alpha=alpha, n_max=n_max, seed=2)
  failures = int(np.sum(level > budgeted.grid_level(p, GRID)))
  assert failures > st.binom.ppf(0.999, reps, alpha), failures / reps


def test_looks_and_alphas():
  b = budgeted.Budget(grid=(0.25, 0.5), first=1000, ratio=2.0, final_share=0.5)
  assert b.grid == (0.0, 0.25, 0.5)
  looks = b.looks(100_000)
  assert looks[0] == 1000 and looks[-1] == 100_000 and np.all(np.diff(looks) > 0)
  a = b.alphas(0.001, 100_000)
  assert a.shape == looks.shape and np.isclose(a.sum(), 0.001) and a[-1] == 0.0005
  assert list(b.looks(500)) == [500] and list(b.alphas(0.01, 500)) == [0.01]
  for bad in [
    dict(grid=()),
    dict(grid=(0.5, 0.25)),
    dict(grid=(-1.0,)),
    dict(grid=(0.1,), ratio=1.0),
    dict(grid=(0.1,), first=0),
    dict(grid=(0.1,), final_share=0.0),
  ]:
    with pytest.raises(ValueError):
      budgeted.Budget(**bad)


def test_stopping_rule_decisions():
  # Deterministic counts through the host driver: clean, hopeless, at n_max.
  budget = budgeted.Budget(grid=GRID, first=100, ratio=2.0)

  def count_fn(active, start, stop):
    frac = np.array([1.0, 0.0, st.norm.cdf(0.5)])[active]
    return np.floor(frac * stop) - np.floor(frac * start)

  _, used, p_lower = budgeted.sequential_bounds(
    count_fn, 3, n_max=100_000, alpha=0.001, budget=budget
  )
  level = budgeted.grid_level(p_lower, GRID)
  assert level[0] == 4 and used[0] < 10_000  # clears the top grid radius early
  assert level[1] == -1 and used[1] == 100  # abstain certain at the first look
  assert used[2] == 100_000  # right at a level: runs to n_max


def _linear(dim=16, num_classes=2):
  w = np.zeros((dim, num_classes), np.float32)
  w[:, 1] = 1.0 / np.sqrt(dim)
  return lambda params, x: x.reshape(x.shape[0], -1) @ params, w


def test_engine_rounds_continue_the_certify_stream():
  apply_fn, w = _linear()
  margins = np.array([-0.6, 0.05, 0.3, 1.5, 3.0])  # signed distance to the boundary
  x = np.zeros((5, 16), np.float32) + margins[:, None].astype(np.float32) / 4.0
  key, ids, n_max = jax.random.key(5), np.array([3, 11, 7, 0, 42]), 8000
  budget = budgeted.Budget(grid=GRID, first=1000)
  kw = dict(sigma=1.0, num_classes=2, n0=100, alpha=0.001, ids=ids)
  cert = rsjax.certify(key, apply_fn, w, x, n=n_max, batch_size=1000, budget=budget, **kw)
  assert isinstance(cert, budgeted.BudgetedCertificate)
  assert np.all(cert.counts.sum(1) == cert.num_samples)
  # The counts of the samples used are those of the first samples of CERTIFY's
  # estimation stream: sample j of input i from fold_in(fold_in(fold_in(key, 1), i), j).
  k_est, j = jax.random.fold_in(key, 1), np.arange(n_max)
  for i in range(5):
    eps = rsjax.sample_noise(noise.get_noise(None), k_est, int(ids[i]), j, (16,))
    pred = np.asarray(apply_fn(w, x[i] + eps)).argmax(1)[: cert.num_samples[i]]
    np.testing.assert_array_equal(np.bincount(pred, minlength=2), cert.counts[i])
  # Sound radius (true distance |margin|, class sign(margin)); clear inputs stop early.
  pred_ok = cert.prediction == (margins > 0)
  assert np.all(cert.radius[pred_ok] <= np.abs(margins[pred_ok]))
  assert np.all(cert.radius[~pred_ok] == 0) and cert.prediction[4] == 1
  assert cert.num_samples[4] < n_max and cert.num_samples.max() <= n_max
  # Reproducible whatever the batch size, order or devices.
  perm = np.array([4, 2, 0, 3, 1])
  again = rsjax.certify(
    key,
    apply_fn,
    w,
    x[perm],
    n=n_max,
    batch_size=384,
    budget=budget,
    devices=1,
    **{**kw, "ids": ids[perm]},
  )
  np.testing.assert_array_equal(again.num_samples, cert.num_samples[perm])
  np.testing.assert_array_equal(again.radius, cert.radius[perm])


def test_budget_argument_errors():
  apply_fn, w = _linear()
  x = np.zeros((2, 16), np.float32)
  with pytest.raises(ValueError, match="multiclass"):
    rsjax.certify(0, apply_fn, w, x, sigma=1.0, num_classes=2, budget=GRID, multiclass=True)
  with pytest.raises(ValueError, match="grid"):
    rsjax.certify(0, apply_fn, w, x, sigma=1.0, num_classes=2, budget=(0.5, 0.1))


def test_samples_summary_and_table():
  from rsjax import metrics
  from rsjax.records import io

  s = metrics.samples_summary([1000, 2000, 100_000, 4000])
  assert s["mean"] == 26_750 and s["min"] == 1000 and s["max"] == 100_000
  res = io.CertifyResults(
    idx=np.arange(4),
    label=np.zeros(4, np.int64),
    predict=np.zeros(4, np.int64),
    radius=np.array([0.1, 0.3, 0.6, 0.0]),
    correct=np.ones(4, bool),
    time=np.zeros(4),
    extra={"samples": np.array([1000.0, 2000, 100_000, 4000])},
  )
  table = metrics.format_table({"b": res}, [0.0, 0.25])
  assert "samples mean" in table and "26750" in table
  with pytest.raises(ValueError):
    metrics.samples_summary([])


# A grid that reaches p_A = Phi(3) = 0.99865, like the benchmark's grid 0 .. 1.5 at sigma 0.5.
HIGH_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)


def test_cannot_reach_within_n_max_stops_early():
  # p_A just above the top level, too close for n_max = 100,000 samples to show it
  # (n_max certifies level 5 only): stops before n_max at that level. The plain
  # "all remaining samples succeed" test ran these inputs to n_max.
  budget = budgeted.Budget(grid=HIGH_GRID, first=100, ratio=2.0)
  frac = np.array([0.998, 0.9985])

  def count_fn(active, start, stop):
    return np.floor(frac[active] * stop) - np.floor(frac[active] * start)

  _, used, p_lower = budgeted.sequential_bounds(
    count_fn, 2, n_max=100_000, alpha=0.001, budget=budget
  )
  at_n_max = rsjax.stats.clopper_pearson_lower(
    np.floor(frac * 100_000), 100_000, budget.alphas(0.001, 100_000)[-1]
  )
  assert np.all(budgeted.grid_level(at_n_max, HIGH_GRID) == 5)
  assert np.all(budgeted.grid_level(p_lower, HIGH_GRID) == 5)
  assert np.all(used <= 51_200), used


def test_stopping_early_rarely_costs_a_level():
  # p_A just above the top level, where n_max certifies it about half the time:
  # an input that stops early ends below the level its own samples certify at
  # n_max with probability <= 2 (K - 1) stop_alpha + alpha_K (module docstring).
  alpha, reps, n_max = 0.001, 20_000, 51_200
  budget = budgeted.Budget(grid=HIGH_GRID, first=100, ratio=2.0, stop_alpha=0.01)
  looks, alphas = budget.looks(n_max), budget.alphas(alpha, n_max)
  thr = st.norm.cdf(3.0)
  p = (
    next(
      k
      for k in range(int(thr * n_max), n_max)
      if rsjax.stats.clopper_pearson_lower(k, n_max, alphas[-1]) >= thr
    )
    / n_max
  )
  rng = np.random.default_rng(3)
  steps = np.diff(np.concatenate([[0], looks]))
  cum = np.concatenate(
    [np.zeros((reps, 1), np.int64), np.cumsum(rng.binomial(steps, p, size=(reps, len(looks))), 1)],
    1,
  )
  look_index = {int(n): i + 1 for i, n in enumerate(looks)} | {0: 0}

  def count_fn(active, start, stop):
    return cum[active, look_index[stop]] - cum[active, look_index[start]]

  _, used, p_lower = budgeted.sequential_bounds(
    count_fn, reps, n_max=n_max, alpha=alpha, budget=budget
  )
  level = budgeted.grid_level(p_lower, HIGH_GRID)
  final = budgeted.grid_level(
    rsjax.stats.clopper_pearson_lower(cum[:, -1], n_max, alphas[-1]), HIGH_GRID
  )
  assert 0.3 < np.mean(final == 6) < 0.7  # the top level is a coin flip at n_max
  assert np.mean(used < n_max) > 0.03  # some inputs stop early all the same
  lost = int(np.sum((level < final) & (used < n_max)))
  bound = 2 * (len(looks) - 1) * budget.stop_alpha + alphas[-1]
  assert lost <= st.binom.ppf(0.999, reps, bound), lost / reps
