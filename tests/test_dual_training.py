"""The estimator's half of dual randomized smoothing: its targets (``rsjax.dual.training``)
and the offsets of its logits chosen on held-out data (``rsjax.dual._calibrate``)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from rsjax import dual, models
from rsjax.dual.training import targets_from_hits


def test_confident_target_is_the_largest_sigma_right_on_every_draw():
  sigmas = (0.25, 0.5, 1.0)
  p = np.array(
    [  # columns: inputs
      [1.0, 1.0, 0.9, 0.6, 1.0],
      [1.0, 0.5, 0.7, 0.9, 1.0],
      [0.9, 1.0, 0.3, 0.9, 1.0],
    ]
  )
  got = targets_from_hits(p, sigmas, draws=16, rule="confident", tau=1.0)
  # 0.5 (1.0 misses a draw); 1.0 (right on all, 0.5 is not: not monotone); none right on
  # all: the most accurate, 0.25; none: the first of two maxima, 0.5; all: the largest.
  assert got.tolist() == [1, 2, 0, 1, 2]
  # The radius rule prefers sigma 1.0 right on 90% (1.28) to 0.5 on all draws (0.93).
  assert targets_from_hits(p, sigmas, draws=16, rule="radius")[0] == 2
  # tau below 1 admits a draw missed; the sigmas need not be sorted.
  assert targets_from_hits(p, sigmas, draws=16, tau=0.9)[0] == 2
  assert targets_from_hits(p[::-1], sigmas[::-1], draws=16).tolist() == [1, 0, 2, 1, 0]
  with pytest.raises(ValueError, match="target rule"):
    targets_from_hits(p, sigmas, draws=16, rule="largest")


def test_shift_logits_adds_the_offsets_to_the_output_layer():
  m = models.create_model("mlp", num_classes=3, input_shape=(8, 8, 1), rngs=0)
  x = jax.random.uniform(jax.random.key(0), (5, 8, 8, 1))
  apply_fn, params = models.to_apply_fn(m)
  before = np.asarray(apply_fn(params, x))
  dual.shift_logits(m, [0.0, 1.5, -2.0])
  apply_fn, params = models.to_apply_fn(m)
  np.testing.assert_allclose(np.asarray(apply_fn(params, x)) - before,
                             np.tile([0.0, 1.5, -2.0], (5, 1)), atol=1e-5)  # fmt: skip
  with pytest.raises(ValueError, match="one nnx.Linear"):
    dual.shift_logits(m, [0.0, 1.0])


def _cohen(share, sigma, n, alpha):
  from rsjax.claims import cp_lower

  p = float(cp_lower(round(share * n), n, alpha))
  return sigma * float(jax.scipy.stats.norm.ppf(p)) if p > 0.5 else 0.0


def test_predicted_radii_is_the_smaller_of_the_two_cohen_radii():
  # Input 0: the estimator votes index 1 on 15 of 16 draws; expert 1 right on all.
  # Input 1: index 0 on 9 of 16, expert 0 wrong (share 0.2): no radius.
  logits = np.zeros((2, 16, 2))
  logits[0, :15, 1] = 1.0
  logits[1, :9, 0] = 1.0
  logits[1, 9:, 1] = 1.0
  hits = np.array([[0.9, 0.2], [1.0, 0.7]])
  r = dual.predicted_radii(logits, np.zeros(2), hits, (0.25, 1.0), sigma_estimator=0.5,
                           n=1000, alphas=(0.005, 0.005))  # fmt: skip
  want0 = min(_cohen(15 / 16, 0.5, 1000, 0.005), _cohen(1.0, 1.0, 1000, 0.005))
  np.testing.assert_allclose(r, [want0, 0.0], rtol=1e-6)
  # An offset of +2 on index 1 moves input 1 to expert 1 (right on 70%), unanimously.
  r = dual.predicted_radii(logits, np.array([0.0, 2.0]), hits, (0.25, 1.0), sigma_estimator=0.5,
                           n=1000, alphas=(0.005, 0.005))  # fmt: skip
  assert r[1] == pytest.approx(_cohen(0.7, 1.0, 1000, 0.005)) and r[1] > 0


def test_choose_offsets_undoes_a_biased_estimator():
  """An estimator whose logits lean to the small sigma by 3 for every input: the offsets
  chosen take the lean back, and the predicted gap to the envelope closes."""
  rng = np.random.default_rng(0)
  n_in, draws = 200, 32
  robust = rng.random(n_in) < 0.6  # expert 1 right on every draw; else only expert 0
  hits = np.stack([np.full(n_in, 1.0), np.where(robust, 1.0, 0.3)])
  score = np.where(robust, 1.0, -1.0)[:, None] + 0.3 * rng.standard_normal((n_in, draws))
  logits = np.stack([np.full((n_in, draws), 3.0), score], axis=-1)  # lean of 3 to index 0
  kw = dict(sigma_estimator=1.0, n=2000, alpha=0.001, alphas=(5e-4, 5e-4),
            radii=(0.0, 0.5, 1.0, 1.5), grid=(0.0, 1.0, 2.0, 3.0, 4.0))  # fmt: skip
  for objective in ("worst", "total"):
    offsets, facts = dual.choose_offsets(logits, hits, (0.25, 1.0), objective=objective, **kw)
    # +3 routes the robust inputs to expert 1, the others to expert 0, unanimously.
    assert offsets.tolist() == [0.0, 3.0], objective
    assert facts["gap_no_offsets"] < -0.5 and facts["gap"] > -0.02 and facts["shortfall"] < 0.03
    assert facts["dual"][2] > facts["dual_no_offsets"][2] + 0.5  # r = 1: only expert 1 serves
  with pytest.raises(ValueError, match="objective"):
    dual.choose_offsets(logits, hits, (0.25, 1.0), sigma_estimator=1.0, n=2000, alpha=0.001,
                        alphas=(5e-4, 5e-4), radii=(0.0,), objective="mean")  # fmt: skip


def test_init_from_copies_all_but_the_head():
  from flax import nnx

  from rsjax.dual.training import init_from

  expert = models.create_model("mlp", num_classes=10, input_shape=(8, 8, 1), rngs=0)
  est = models.create_model("mlp", num_classes=3, input_shape=(8, 8, 1), rngs=1)

  def params(m):
    return {p: np.asarray(v[...]) for p, v in nnx.iter_graph(m) if isinstance(v, nnx.Param)}

  before, src = params(est), params(expert)
  n = init_from(est, expert)
  after = params(est)
  same = [p for p in after if p in src and src[p].shape == after[p].shape]
  assert n == len(same) >= 2 and len(same) < len(after)  # the head (3 outputs) stays
  for p in after:
    want = src[p] if p in same else before[p]
    np.testing.assert_array_equal(after[p], want)


def test_consistent_targets_keep_the_majority_where_its_expert_serves():
  from rsjax.dual.training import consistent_targets

  share = np.array([[0.2, 0.8], [0.9, 0.1], [0.4, 0.6], [0.5, 0.5]])
  hits = np.array([[1.0, 1.0, 1.0, 0.2], [0.9, 0.3, 0.4, 1.0]])  # [K, n]
  targets = np.array([0, 1, 0, 1])
  # 0: majority 1, its expert right on 90%: 1. 1: majority 0 (right on all): 0.
  # 2: majority 1, its expert right on 40% < keep: the old target 0. 3: a tie goes to 0,
  # whose expert is right on 20%: the old target 1.
  got = consistent_targets(share, hits, targets, keep=0.5)
  assert got.tolist() == [1, 0, 0, 1]
  assert consistent_targets(share, hits, targets, keep=0.3).tolist() == [1, 0, 1, 1]
