"""Tests of the NNX DEQ classifier (rsjax.srs)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from rsjax import models, training


@pytest.fixture(scope="module")
def small():
  model = models.DEQClassifier(
    input_shape=(12, 12, 1), num_classes=3, channels=8, groups=2, steps=8, rngs=0
  )
  x = jax.random.uniform(jax.random.key(0), (6, 12, 12, 1))
  return model, x


def test_forward_shapes_solvers_and_warm_start(small):
  model, x = small
  deq_fn, variables = models.to_deq_fn(model)
  run = jax.jit(deq_fn, static_argnums=3)
  logits, res = run(variables, x, None, models.SolverConfig(steps=30))
  assert logits.shape == (6, 3) and res.z.shape == (6, 6, 6, 8) == model.state_shape(6)
  assert res.residual.shape == (6,) and float(res.residual.max()) < 1e-3
  # Anderson and plain iteration agree at convergence.
  logits_i, res_i = run(variables, x, None, models.SolverConfig(name="iteration", steps=60))
  np.testing.assert_allclose(logits_i, logits, atol=1e-3)
  # A warm start at the fixed point stays there: one step gives the same logits.
  warm, res_w = run(variables, x, res.z, models.SolverConfig(name="iteration", steps=1))
  np.testing.assert_allclose(warm, logits, atol=1e-3)
  cold, res_c = run(variables, x, None, models.SolverConfig(name="iteration", steps=1))
  assert np.all(np.asarray(res_w.residual) < np.asarray(res_c.residual))
  # The standard apply_fn: zero init, fixed steps.
  apply_fn, v2 = models.make_apply_fn(model, steps=30)
  np.testing.assert_allclose(jax.jit(apply_fn)(v2, x), logits, atol=1e-5)
  assert apply_fn == models.make_apply_fn(model, steps=30)[0] and hash(apply_fn)
  with pytest.raises(ValueError, match="shape"):
    model.inject(jnp.zeros((2, 28, 28, 1)))


@pytest.mark.heavy
def test_implicit_gradient_trains(small):
  model, x = small
  model = nnx.clone(model)
  y = jnp.array([0, 1, 2, 0, 1, 2])
  opt = nnx.Optimizer(model, optax.adam(3e-3), wrt=nnx.Param)

  @nnx.jit
  def step(model, opt, key):
    def loss_fn(model):
      logits, jac = model.jacobian_loss(x, key)
      ce = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
      return ce + 0.1 * jac.mean(), ce

    (_, ce), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    opt.update(model, grads)
    return ce

  losses = [float(step(model, opt, jax.random.key(i))) for i in range(15)]
  assert all(np.isfinite(losses)) and losses[-1] < 0.7 * losses[0]
  # __call__ (used by generic trainers) gives the implicit-gradient logits.
  g = nnx.grad(lambda m: jnp.sum(m(x) ** 2))(model)
  leaves = jax.tree.leaves(nnx.state(g, nnx.Param))
  assert all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in leaves)
  assert float(jnp.abs(g.cell.conv1.kernel[...]).sum()) > 0


def _two_halves(n=64, size=8, seed=0):
  """Class 0: bright left half; class 1: bright right half (GroupNorm removes global
  brightness, not position)."""
  rng = np.random.default_rng(seed)
  y = rng.integers(0, 2, n).astype(np.int32)
  left = (np.arange(size) < size // 2)[None, None, :, None]
  x = np.where(y[:, None, None, None] == 0, left, ~left) * 0.8 + 0.1
  return np.clip(x + 0.1 * rng.normal(size=(n, size, size, 1)), 0, 1).astype(np.float32), y


@pytest.mark.heavy
def test_generic_trainer_trains_a_deq():
  """Gaussian augmentation, the Jacobian regularizer (an AuxLoss the trainer adds) and
  the solver's residual and steps logged per epoch, all through rsjax.training.train."""
  x, y = _two_halves()
  cfg = training.TrainConfig(sigma=0.1, epochs=4, batch_size=16, lr=0.05)
  hists = {}
  for weight in (0.0, 5.0):
    model = models.DEQClassifier(
      input_shape=(8, 8, 1),
      num_classes=2,
      channels=4,
      groups=2,
      stem_stride=1,
      steps=6,
      normalize=None,
      jac_weight=weight,
      rngs=1,
    )
    model, hists[weight] = training.train(0, model, (x, y), cfg, eval_data=(x, y), progress=False)
    assert hists[weight][-1]["clean_acc"] > 0.9
  plain, reg = hists[0.0], hists[5.0]
  for h in plain + reg:
    assert h["solver_steps"] == 6 and 0 < h["solver_residual"] < 0.5
  assert "jacobian" not in plain[-1] and "aux_loss" not in plain[-1]
  # The regularizer is in the loss (5 x the Jacobian estimate) and it lowers the Jacobian.
  np.testing.assert_allclose(reg[-1]["aux_loss"], 5.0 * reg[-1]["jacobian"], rtol=1e-4)
  assert reg[-1]["train_loss"] > reg[-1]["aux_loss"]
  assert reg[-1]["jacobian"] < reg[0]["jacobian"]


@pytest.mark.heavy
def test_mdeq_trains_through_the_generic_trainer_and_reloads(tmp_path):
  model = models.MDEQClassifier(
    input_shape=(8, 8, 1),
    num_classes=2,
    channels=(4, 4),
    groups=2,
    stem_stride=1,
    steps=8,
    normalize=None,
    jac_weight=0.5,
    rngs=2,
  )
  assert model.state_shape(3) == (3, 8 * 8 * 4 + 4 * 4 * 4)
  x, y = _two_halves(seed=1)
  cfg = training.TrainConfig(sigma=0.1, epochs=4, batch_size=16, lr=0.05)
  spec = {
    "model": "mdeq",
    "num_classes": 2,
    "input_shape": [8, 8, 1],
    "model_kwargs": {
      "channels": [4, 4],
      "groups": 2,
      "stem_stride": 1,
      "steps": 8,
      "normalize": None,
      "jac_weight": 0.5,
    },
  }
  model, hist = training.train(
    0,
    model,
    (x, y),
    cfg,
    eval_data=(x, y),
    progress=False,
    workdir=tmp_path / "mdeq",
    model_config=spec,
  )
  assert hist[-1]["clean_acc"] > 0.9 and hist[-1]["solver_steps"] == 8
  assert "jacobian" in hist[-1]
  loaded, _ = models.load_model(tmp_path / "mdeq")
  assert isinstance(loaded, models.MDEQClassifier)
  deq_fn, variables = models.to_deq_fn(model)
  run = jax.jit(deq_fn, static_argnums=3)
  logits, res = run(variables, x[:8], None, models.SolverConfig(steps=30))
  assert float(res.residual.max()) < 1e-3
  logits_l, _ = run(models.to_deq_fn(loaded)[1], x[:8], None, models.SolverConfig(steps=30))
  np.testing.assert_allclose(logits_l, logits, atol=1e-5)
  # Broyden and plain iteration reach the same equilibrium of the two-stream state.
  for cfg_b in (
    models.SolverConfig(name="broyden", steps=30),
    models.SolverConfig(name="naive", steps=80),
  ):
    np.testing.assert_allclose(run(variables, x[:8], None, cfg_b)[0], logits, atol=1e-3)
