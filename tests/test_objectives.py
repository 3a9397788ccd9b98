"""Tests of rsjax.training objectives and Sun et al.'s strategies: each trains, each has its property."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import ndtri
from scipy.stats import beta as beta_dist
from scipy.stats import norm

from rsjax import training
from rsjax.training import objectives as obj
from rsjax.training import strategies


def linear_apply(params, x):
  return x.reshape(x.shape[0], -1) @ params["w"] + params["b"]


@pytest.fixture(scope="module")
def small():
  from sklearn.datasets import load_digits

  d = load_digits()
  x = (d.images / 16.0).astype(np.float32)[:128, ..., None]
  y = d.target.astype(np.int32)[:128]
  return x, y


def _params(d=64, c=10):
  return {"w": jnp.zeros((d, c), jnp.float32), "b": jnp.zeros((c,), jnp.float32)}


@pytest.mark.parametrize(
  "objective",
  [
    obj.Gaussian(num_noise=2),
    obj.Consistency(num_noise=2),
    obj.SmoothAdv(num_noise=2, epsilon=0.5, steps=2, warmup=1),
    obj.MACER(num_noise=4),
    obj.Gaussian(num_noise=2, attack=obj.SphereAttack(steps=2, step_size=0.25)),
  ],
  ids=lambda o: o.name + ("+attack" if getattr(o, "attack", None) else ""),
)
def test_objective_trains(objective, small):
  x, y = small

  @jax.jit
  def step(params, key):
    (loss, aux), g = jax.value_and_grad(
      lambda p: objective(key, linear_apply, p, x, y, sigma=0.25, epoch=3), has_aux=True
    )(params)
    return jax.tree.map(lambda p, g: p - 0.5 * g, params, g), loss, aux

  params, losses = _params(), []
  for t in range(30):
    params, loss, aux = step(params, jax.random.key(t))
    losses.append(float(loss))
  assert np.all(np.isfinite(losses))
  assert np.mean(losses[-3:]) < 0.7 * np.mean(losses[:3]), losses
  assert 0 <= float(aux["correct"]) <= len(y)
  assert float(aux["correct"]) / len(y) > 0.5  # noisy training accuracy after 30 steps


def test_replicate_is_input_major_with_per_input_sigma():
  x = jnp.stack([jnp.zeros((3, 2)), jnp.ones((3, 2))])
  xr, yr, delta = obj.replicate(jax.random.key(0), x, jnp.array([4, 7]), jnp.array([0.0, 2.0]), 3)
  np.testing.assert_array_equal(yr, [4, 4, 4, 7, 7, 7])
  np.testing.assert_array_equal(xr[:3], 0.0)
  np.testing.assert_array_equal(xr[3:], 1.0)
  np.testing.assert_array_equal(delta[:3], 0.0)  # sigma 0 for input 0
  assert float(jnp.std(delta[3:])) > 1.0
  # scalar sigma and m = 1: plain sigma * N(0, I) of the key (the historical trainer's noise)
  _, _, d1 = obj.replicate(jax.random.key(5), x, jnp.array([4, 7]), 0.5, 1)
  np.testing.assert_array_equal(d1, 0.5 * jax.random.normal(jax.random.key(5), x.shape))


def test_consistency_matches_formula():
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.uniform(size=(5, 4)), jnp.float32)
  y = jnp.array([0, 1, 2, 0, 1])
  params = {"w": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32), "b": jnp.zeros(3)}
  o = obj.Consistency(num_noise=3, lbd=7.0, eta=0.3)
  loss, _ = o(jax.random.key(1), linear_apply, params, x, y, sigma=0.5)
  xr, yr, delta = obj.replicate(jax.random.key(1), x, y, 0.5, 3)
  logits = np.asarray(linear_apply(params, xr + delta), np.float64)
  logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
  ce = -logp[np.arange(15), np.asarray(yr)].mean()
  p = np.exp(logp).reshape(5, 3, 3)
  avg = p.mean(1)
  kl = (avg[:, None] * (np.log(avg)[:, None] - np.log(p))).sum(-1).mean(1)
  ent = -(avg * np.log(avg + 1e-10)).sum(-1)
  np.testing.assert_allclose(float(loss), ce + np.mean(7.0 * kl + 0.3 * ent), rtol=1e-5)
  assert kl.mean() > 1e-4  # the noise changes the predictions, so the KL term is active


def test_macer_matches_formula():
  """Noise-free logits: p and q are plain softmaxes; check the hinge on the radius."""
  logits = np.array(
    [[0.8, 0.0, -1.0], [0.1, 0.0, 0.0], [0.0, 3.0, 0.0], [9.0, 0.0, 0.0]], np.float32
  )
  y = np.array([0, 0, 0, 0])

  def const_apply(params, x):
    return jnp.asarray(logits)[jnp.arange(x.shape[0]) // 2]  # m = 2 identical copies

  o = obj.MACER(num_noise=2, lbd=3.0, gamma=2.0, beta=1.5)
  sigma = np.array([0.5, 0.5, 0.5, 1.0], np.float32)
  loss, aux = o(
    jax.random.key(0),
    const_apply,
    None,
    jnp.zeros((4, 2)),
    jnp.asarray(y),
    sigma=jnp.asarray(sigma),
  )
  sm = lambda z: np.exp(z) / np.exp(z).sum(1, keepdims=True)  # noqa: E731
  p, q = sm(logits.astype(np.float64)), sm(1.5 * logits.astype(np.float64))
  xent = -np.log(p[:, 0] + 1e-10)
  top = -np.sort(-q, 1)
  xi = ndtri(top[:, 0]) - ndtri(top[:, 1])
  correct = q.argmax(1) == y
  robust = np.where(correct & (xi <= 2.0), (2.0 - xi) * sigma / 2, 0.0)
  # rows: 0 correct, xi < gamma (hinge active); 1 correct, tiny margin; 2 wrong class;
  # 3 correct with xi > gamma (no robustness term)
  assert correct.tolist() == [True, True, False, True] and xi[3] > 2.0 and xi[0] < 2.0
  np.testing.assert_allclose(float(loss), np.mean(xent + 3.0 * robust), rtol=1e-5)
  np.testing.assert_allclose(float(aux["robust"]), robust.mean(), rtol=1e-5)


def test_macer_deferred_switches_the_hinge_on_at_its_epoch():
  """Before ``deferred`` the loss is the smoothed cross-entropy alone; from it on, the hinge adds."""
  logits = np.array([[0.8, 0.0, -1.0], [0.4, 0.0, 0.0]], np.float32)

  def const_apply(params, x):
    return jnp.asarray(logits)[jnp.arange(x.shape[0]) // 2]

  o = obj.MACER(num_noise=2, lbd=3.0, gamma=2.0, beta=1.5, deferred=2)
  args = (const_apply, None, jnp.zeros((2, 2)), jnp.zeros(2, jnp.int32))
  early = [o(jax.random.key(0), *args, sigma=0.5, epoch=e) for e in (0, 1)]
  late = [o(jax.random.key(0), *args, sigma=0.5, epoch=e) for e in (2, 5)]
  for loss, aux in early:
    np.testing.assert_allclose(float(loss), float(aux["xent"]), rtol=1e-6)
  assert float(late[0][1]["robust"]) > 0
  for loss, aux in late:
    np.testing.assert_allclose(
      float(loss), float(aux["xent"]) + 3.0 * float(aux["robust"]), rtol=1e-6
    )
  with pytest.raises(ValueError, match="deferred"):
    obj.MACER(deferred=-1)


def test_smoothadv_perturbation_within_epsilon(small):
  x, y = small
  params = {
    "w": jnp.asarray(np.random.default_rng(0).normal(size=(64, 10)), jnp.float32),
    "b": jnp.zeros(10),
  }
  o = obj.SmoothAdv(num_noise=2, epsilon=0.8, steps=4, warmup=4)
  np.testing.assert_allclose(
    [float(o.epsilon_at(e)) for e in range(6)], [0.2, 0.4, 0.6, 0.8, 0.8, 0.8], rtol=1e-6
  )
  _, _, noise = obj.replicate(jax.random.key(0), jnp.asarray(x), jnp.asarray(y), 0.25, 2)
  for eps in (0.3, 0.8):
    adv = np.asarray(o.attack(linear_apply, params, jnp.asarray(x), jnp.asarray(y), noise, eps))
    norms = np.linalg.norm((adv - x).reshape(len(x), -1), axis=1)
    assert np.all(norms <= eps * (1 + 1e-5)), norms.max()
    assert np.median(norms) > 0.5 * eps  # the attack moves
    assert adv.min() >= 0 and adv.max() <= 1
  # the attack raises the smoothed loss it ascends
  _, aux = o(
    jax.random.key(0), linear_apply, params, jnp.asarray(x), jnp.asarray(y), sigma=0.25, epoch=10
  )
  assert float(aux["max_perturbation"]) <= 0.8 * (1 + 1e-5)
  assert float(aux["epsilon"]) == pytest.approx(0.8)


def test_sphere_attack_keeps_norm_and_first_misclassifying_iterate():
  # linear binary classifier on R^2: class 0 iff x_0 > 0
  w = jnp.array([[1.0, -1.0], [0.0, 0.0]])

  def apply(params, x):
    return x @ w

  x = jnp.array([[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]])
  y = jnp.array([0, 0, 0])
  delta0 = jnp.array([[0.0, 0.6], [0.0, 3.0], [0.0, 0.5]])
  att = obj.SphereAttack(steps=5, step_size=2.0, norm="l2")
  delta = np.asarray(att(apply, None, x, y, delta0))
  np.testing.assert_allclose(
    np.linalg.norm(delta, axis=1), np.linalg.norm(delta0, axis=1), rtol=1e-6
  )
  # row 2 is misclassified from the start: unchanged
  np.testing.assert_array_equal(delta[2], delta0[2])
  # row 1: one step (-2, 3) renormalized to radius 3 already misclassifies (x_0 + d_0 < 0):
  # it is frozen there, not pushed further by the 4 remaining steps
  one = np.array([-2.0, 3.0]) * 3.0 / np.sqrt(13.0)
  np.testing.assert_allclose(delta[1], one, rtol=1e-5)
  # row 0: the radius 0.6 sphere around x never crosses x_0 = 0: still correct, moved
  assert delta[0][0] < 0 and 1.0 + delta[0][0] > 0
  # Linf steps keep the norm too
  d2 = np.asarray(obj.SphereAttack(steps=3, step_size=0.5, norm="linf")(apply, None, x, y, delta0))
  np.testing.assert_allclose(np.linalg.norm(d2, axis=1), np.linalg.norm(delta0, axis=1), rtol=1e-6)


def test_sphere_attack_starts_at_its_epoch(small):
  x, y = small
  params = {
    "w": jnp.asarray(np.random.default_rng(1).normal(size=(64, 10)), jnp.float32),
    "b": jnp.zeros(10),
  }
  g = obj.Gaussian(num_noise=2, attack=obj.SphereAttack(steps=3, step_size=0.5, start_epoch=2))
  plain = obj.Gaussian(num_noise=2)
  key = lambda: jax.random.key(3)  # noqa: E731  (the same noise in all three calls)
  before = g(key(), linear_apply, params, x, y, sigma=0.5, epoch=1)[0]
  after = g(key(), linear_apply, params, x, y, sigma=0.5, epoch=2)[0]
  ref = plain(key(), linear_apply, params, x, y, sigma=0.5)[0]
  assert float(before) == float(ref)
  assert float(after) > float(ref)  # the attack finds worse noise on the same spheres


def test_discard_mask_and_resample():
  counts = np.array([0, 39, 40, 41, 100])
  np.testing.assert_array_equal(
    strategies.discard_mask(counts, 100, 0.4), [False, False, True, True, True]
  )
  with pytest.raises(ValueError, match="counts"):
    strategies.discard_mask([101], 100, 0.4)
  w = np.array([0.0, 1.0, 0.0, 3.0])
  idx = strategies.resample(jax.random.key(0), w, 4000)
  assert idx.shape == (4000,) and set(np.unique(idx)) == {1, 3}
  assert abs(np.mean(idx == 3) - 0.75) < 0.03


def test_reweigh_weights_match_authors_code():
  counts = np.arange(17)
  w = strategies.reweigh_weights(counts, 16, alpha=0.1, p_min=0.75)
  expect = norm.ppf(beta_dist.ppf(0.1, np.maximum(counts, 12), 16 - np.maximum(counts, 12) + 1))
  np.testing.assert_allclose(w, expect, rtol=1e-12)
  assert w[0] == w[12] == pytest.approx(0.1537, abs=1e-4)
  assert w[16] == pytest.approx(1.108, abs=1e-3)
  assert w[16] / w[12] == pytest.approx(7.2, abs=0.05)
  assert np.all(np.diff(w[12:]) > 0)


def test_make_objective_errors():
  assert training.make_objective("consistency", lbd=20.0) == obj.Consistency(lbd=20.0)
  with pytest.raises(ValueError, match="unknown objective"):
    training.make_objective("trades")
  with pytest.raises(ValueError, match="no hyperparameter epsilon"):
    training.make_objective("macer", epsilon=1.0)
  with pytest.raises(ValueError, match="num_noise"):
    obj.MACER(num_noise=0)
  with pytest.raises(ValueError, match="norm"):
    obj.SphereAttack(norm="l1")
  assert obj.Gaussian(attack=obj.SphereAttack()).to_json() == {
    "name": "gaussian",
    "num_noise": 1,
    "attack": {"steps": 6, "step_size": 0.25, "norm": "l2", "start_epoch": 0},
  }
  assert math.isclose(obj.SmoothAdv().epsilon, 1.0)
