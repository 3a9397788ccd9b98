"""The sigma estimator trained the paper's way (``rsjax.dual.paper``): soft radius labels,
the consistency term, rebalancing, sigma_g at least the largest candidate, and one
classifier trained for every sigma."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special

from rsjax import models, training
from rsjax.dual import paper

SIGMAS = (0.25, 0.5, 1.0)


def test_soft_targets_are_a_softmax_over_the_estimated_radii():
  # Input 0: right on every draw at every sigma (the largest radius is sigma 1.0's);
  # input 1: sigma 1.0 right on only 40% (a negative radius), 0.5 on 95%.
  p = np.array([[1.0, 1.0], [1.0, 0.95], [1.0, 0.4]])
  got = paper.soft_targets(p, SIGMAS, draws=100, temperature=0.25)
  q = np.clip(p, 0.005, 0.995)
  radii = np.asarray(SIGMAS)[:, None] * special.ndtri(q)
  want = special.softmax(radii.T / 0.25, axis=1)
  np.testing.assert_allclose(got, want, rtol=1e-12)
  np.testing.assert_allclose(got.sum(axis=1), 1.0)
  assert got.argmax(axis=1).tolist() == [2, 1]
  assert got[0, 2] > 0.99  # 2.58 against 1.29: nearly one-hot at this temperature
  # A higher temperature spreads the mass; none is allowed at or below 0.
  soft = paper.soft_targets(p, SIGMAS, draws=100, temperature=2.0)
  assert soft[0, 2] < got[0, 2] and soft[0, 0] > got[0, 0]
  with pytest.raises(ValueError, match="temperature"):
    paper.soft_targets(p, SIGMAS, draws=100, temperature=0.0)


def test_rebalance_weights_are_the_inverse_frequency_of_the_best_sigma():
  soft = np.array([[0.9, 0.1], [0.8, 0.2], [0.6, 0.4], [0.3, 0.7]])  # best: 0, 0, 0, 1
  w = paper.rebalance_weights(soft)
  np.testing.assert_allclose(w, [2 / 3, 2 / 3, 2 / 3, 2.0])
  assert w.mean() == pytest.approx(1.0)
  # Each best sigma then carries the same total weight.
  assert w[:3].sum() == pytest.approx(w[3:].sum())


def test_consistency_term_penalizes_copies_that_disagree():
  soft = jnp.array([[0.5, 0.5]])
  w = jnp.ones(1)
  agree = jnp.array([[[2.0, 0.0], [2.0, 0.0]]])  # [B=1, m=2, K=2]
  differ = jnp.array([[[2.0, 0.0], [0.0, 2.0]]])
  kw = dict(lbd=40.0, eta=0.5)
  plain_agree, _ = paper.estimator_loss(agree, soft, w, consistency=False, **kw)
  plain_differ, _ = paper.estimator_loss(differ, soft, w, consistency=False, **kw)
  # Without the term both cost the same cross-entropy against a 50/50 target...
  assert float(plain_agree) == pytest.approx(float(plain_differ))
  # ...with it, the copies that disagree cost more: the KL between them is > 0.
  cons_agree, aux_a = paper.estimator_loss(agree, soft, w, consistency=True, **kw)
  cons_differ, aux_d = paper.estimator_loss(differ, soft, w, consistency=True, **kw)
  assert float(aux_a["kl"]) == pytest.approx(0.0, abs=1e-6)
  assert float(aux_d["kl"]) > 0.1
  assert float(cons_differ) > float(cons_agree) + 40 * 0.1


def test_loss_weights_the_inputs():
  logits = jnp.array([[[3.0, 0.0]], [[0.0, 3.0]]])  # two inputs, one copy each
  soft = jnp.array([[1.0, 0.0], [1.0, 0.0]])  # input 0 right, input 1 wrong
  kw = dict(lbd=0.0, eta=0.0, consistency=False)
  even, _ = paper.estimator_loss(logits, soft, jnp.array([1.0, 1.0]), **kw)
  heavy, _ = paper.estimator_loss(logits, soft, jnp.array([1.0, 3.0]), **kw)
  assert float(heavy) > float(even)


def test_sigma_g_must_reach_the_largest_candidate():
  paper.check_sigma_g(1.0, SIGMAS)
  paper.check_sigma_g(1.5, SIGMAS)
  with pytest.raises(ValueError, match="sigma_g must be >= the largest candidate 1.0"):
    paper.check_sigma_g(0.5, SIGMAS)


def _blobs(n=240, seed=0):
  """Inputs whose mean brightness says their class: a separable 3-way problem."""
  rng = np.random.default_rng(seed)
  k = rng.integers(0, 3, n)
  x = np.clip(0.15 + 0.35 * k[:, None, None, None] + 0.05 * rng.standard_normal((n, 6, 6, 1)),
              0, 1).astype(np.float32)  # fmt: skip
  return x, k


def _agreement(model, x, k, sigma):
  apply_fn, params = models.to_apply_fn(model)
  noisy = x + sigma * np.asarray(jax.random.normal(jax.random.key(5), x.shape))
  return float(np.mean(np.argmax(np.asarray(apply_fn(params, noisy)), -1) == k))


def test_train_estimator_learns_soft_targets():
  x, k = _blobs()
  soft = 0.1 / 3 + 0.9 * np.eye(3)[k]  # mostly the class, a little on every sigma
  m = models.create_model("mlp", num_classes=3, input_shape=(6, 6, 1), rngs=0)
  before = _agreement(m, x, k, 0.1)
  recipe = paper.EstimatorRecipe(epochs=8, batch_size=32, lr=1e-2)
  m, hist = paper.train_estimator(jax.random.key(0), m, x, soft, sigma=0.1, recipe=recipe)
  assert len(hist) == 8 and hist[-1]["loss"] < hist[0]["loss"]
  assert _agreement(m, x, k, 0.1) > max(0.9, before)
  with pytest.raises(ValueError, match="soft has 3 rows"):
    paper.train_estimator(jax.random.key(0), m, x, soft[:3], sigma=0.1, recipe=recipe)
  with pytest.raises(ValueError, match="epochs must be an integer >= 1"):
    paper.EstimatorRecipe(epochs=0)


def test_rebalancing_lifts_the_rare_sigma():
  """Nine in ten inputs are of class 0: the class-1 inputs are learned better with the
  inverse-frequency weights than without them, on the same short schedule."""
  rng = np.random.default_rng(1)
  n = 300
  k = (rng.random(n) < 0.1).astype(np.int64)
  x = np.clip(0.45 + 0.1 * k[:, None, None, None] + 0.1 * rng.standard_normal((n, 6, 6, 1)),
              0, 1).astype(np.float32)  # fmt: skip
  soft = np.eye(2)[k]
  rare = {}
  for rebalance in (False, True):
    m = models.create_model("mlp", num_classes=2, input_shape=(6, 6, 1), rngs=0)
    recipe = paper.EstimatorRecipe(epochs=3, batch_size=50, lr=3e-3, consistency=False,
                                   rebalance=rebalance)  # fmt: skip
    m, _ = paper.train_estimator(jax.random.key(0), m, x, soft, sigma=0.0, recipe=recipe)
    apply_fn, params = models.to_apply_fn(m)
    pred = np.argmax(np.asarray(apply_fn(params, x)), -1)
    rare[rebalance] = float(np.mean(pred[k == 1] == 1))
  assert rare[True] > rare[False]


def test_candidate_sigma_draws_each_input_from_the_candidates():
  bs = paper.CandidateSigma((0.25, 0.5, 1.0))
  state = bs.init(100)
  x = jnp.zeros((4000, 2))
  _, sig = bs(jax.random.key(0), state, None, None, x, jnp.arange(4000), 0)
  values, counts = np.unique(np.asarray(sig), return_counts=True)
  np.testing.assert_allclose(values, [0.25, 0.5, 1.0])
  assert counts.min() > 1200  # about a third each
  assert bs.to_json() == {"name": "candidate_sigma", "sigmas": [0.25, 0.5, 1.0]}
  with pytest.raises(ValueError, match="sigmas must be"):
    paper.CandidateSigma((0.25, 0.0))


def test_one_classifier_trained_for_every_sigma(tmp_path):
  """The trainer takes CandidateSigma: one model, noise from every candidate, saved with
  its batch_sigma recorded."""
  x, k = _blobs(120)
  m = models.create_model("mlp", num_classes=3, input_shape=(6, 6, 1), rngs=0)
  tc = training.TrainConfig(sigma=1.0, epochs=2, batch_size=40, lr=0.05,
                            batch_sigma=paper.CandidateSigma(SIGMAS))  # fmt: skip
  m, hist = training.train(0, m, (x, k), tc, workdir=str(tmp_path / "joint"), progress=False,
                           model_config={"model": "mlp", "num_classes": 3,
                                         "input_shape": [6, 6, 1]})  # fmt: skip
  assert len(hist) == 2
  config = models.read_config(str(tmp_path / "joint"))
  assert config["train"]["batch_sigma"] == {"name": "candidate_sigma", "sigmas": list(SIGMAS)}
