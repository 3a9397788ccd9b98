"""One-step diffusion denoising, DnCNN and denoiser training (small, fast)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats as st

import rsjax
from rsjax.models.denoise import DnCNN, denoised, diffusion, train


def test_timestep_rule_linear_schedule():
  a = diffusion.linear_schedule()
  # Carlini et al.'s rule on the 2x-1 scale: smallest t >= 1 with sqrt((1-a)/a) >= 2 sigma.
  assert [diffusion.timestep_for_sigma(a, s) for s in (0.12, 0.25, 0.5, 1.0)] == [70, 145, 259, 396]
  for s in (0.12, 0.25, 0.5, 1.0):
    t = diffusion.timestep_for_sigma(a, s)
    level = np.sqrt((1 - a) / a)
    assert level[t] >= 2 * s > level[t - 1]
  with pytest.raises(ValueError, match="above the schedule"):
    diffusion.timestep_for_sigma(a, 1000.0)
  with pytest.raises(ValueError, match="sigma must be > 0"):
    diffusion.timestep_for_sigma(a, 0.0)


def _oracle_eps(x_clean, x_t, t):
  """The exact noise of x_t given the clean image (a perfect noise model)."""
  a = diffusion.linear_schedule()[145]
  return (x_t - np.sqrt(a) * (2 * x_clean - 1)) / np.sqrt(1 - a)


def test_one_step_with_a_perfect_noise_model_returns_the_clean_image():
  sched = diffusion.linear_schedule()
  fn, _ = diffusion.one_step_denoiser(_oracle_eps, sigma=0.25, alphas_cumprod=sched, params=0)
  assert fn.t == 145 and fn.alpha_bar == pytest.approx(sched[145])
  rng = np.random.default_rng(0)
  x = rng.random((3, 4, 4, 1)).astype(np.float32)
  y = x + 0.25 * rng.normal(size=x.shape).astype(np.float32)
  np.testing.assert_allclose(np.asarray(fn(jnp.asarray(x), jnp.asarray(y))), x, atol=1e-5)


def test_one_step_linear_noise_model_certifies_within_the_exact_radius():
  """eps = c x_t makes the one-step denoiser affine (no clipping): with a linear classifier the
  composed classifier is linear, and its exact radius is the distance to its hyperplane."""
  sched = diffusion.linear_schedule()
  sigma, d = 0.5, 6
  fn, _ = diffusion.one_step_denoiser(
    lambda c, x_t, t: c * x_t, sigma=sigma, alphas_cumprod=sched, params=0.3, clip=False
  )
  rng = np.random.default_rng(1)
  w = rng.normal(size=d).astype(np.float32)
  b = np.float32(-0.2)
  # x0 = k (2y - 1) with k = 1 - sqrt(1 - a) c, returned as (x0 + 1) / 2 = k y + (1 - k) / 2;
  # z = w.D(y) + b = k w.y + (b + (1 - k) / 2 sum w).
  k = 1 - np.sqrt(1 - fn.alpha_bar) * 0.3
  w_eff, b_eff = k * w.astype(np.float64), float(b) + (1 - k) / 2 * float(w.sum())
  x = rng.normal(size=(150, d)).astype(np.float32)
  xd = x.astype(np.float64)
  dist = np.abs(xd @ w_eff + b_eff) / np.linalg.norm(w_eff)
  label = (xd @ w_eff + b_eff > 0).astype(int)

  def clf(p, u):
    z = u @ p[0] + p[1]
    return jnp.stack([-z, z], -1)

  apply_fn, params = denoised(
    fn, clf, denoiser_params=0.3, classifier_params=(jnp.asarray(w), jnp.asarray(b))
  )
  cert = rsjax.certify(
    2, apply_fn, params, x, sigma=sigma, num_classes=2, n0=64, n=4000, alpha=0.01, batch_size=2000
  )
  ok = cert.prediction != -1
  assert np.all(cert.prediction[ok] == label[ok])
  assert np.sum(cert.radius > dist + 1e-5) <= int(st.binom.ppf(1 - 1e-4, len(x), 0.01))
  assert np.sum(ok) >= 100


def test_dncnn_starts_as_identity_and_mse_training_lowers_the_loss():
  rng = np.random.default_rng(0)
  x = rng.random((64, 8, 8, 1)).astype(np.float32)
  model = DnCNN(channels=1, depth=3, features=8, rngs=0)
  np.testing.assert_array_equal(np.asarray(model(jnp.asarray(x))), x)
  # Smooth images: the denoiser can learn to average out the noise.
  x = np.repeat(np.repeat(rng.random((64, 2, 2, 1)), 4, 1), 4, 2).astype(np.float32)
  hist = train.train_denoiser(
    0,
    model,
    x,
    train.DenoiserTraining(objective="mse", sigma=0.25, epochs=6, batch_size=16, lr=3e-3),
    log=None,
  )
  assert len(hist) == 6 and hist[-1]["loss"] < 0.8 * hist[0]["loss"], hist
  again = DnCNN(channels=1, depth=3, features=8, rngs=0)
  hist2 = train.train_denoiser(
    0,
    again,
    x,
    train.DenoiserTraining(objective="mse", sigma=0.25, epochs=6, batch_size=16, lr=3e-3),
    log=None,
  )
  assert [h["loss"] for h in hist2] == [h["loss"] for h in hist]  # the same key, the same run


def test_training_settings_and_stability_without_classifier():
  with pytest.raises(ValueError, match="objective must be one of"):
    train.DenoiserTraining(objective="l1")
  with pytest.raises(ValueError, match="sigma must be > 0"):
    train.DenoiserTraining(objective="mse", sigma=0.0)
  with pytest.raises(ValueError, match="needs the frozen classifier"):
    train.train_denoiser(
      0,
      DnCNN(channels=1, depth=2, features=4, rngs=0),
      np.zeros((4, 4, 4, 1), np.float32),
      train.DenoiserTraining(objective="stability"),
      log=None,
    )
  with pytest.raises(ValueError, match="depth >= 2"):
    DnCNN(channels=1, depth=1, rngs=0)


def test_ddpm_loss_is_zero_for_the_true_noise_model():
  a = diffusion.linear_schedule()
  x = jax.random.uniform(jax.random.key(0), (4, 4, 4, 1))
  # A model that knows the clean batch predicts the noise exactly.
  af = jnp.asarray(a, jnp.float32)

  def eps(x0, x_t, t):
    at = af[t].reshape(-1, 1, 1, 1)
    return (x_t - jnp.sqrt(at) * (2 * x0 - 1)) / jnp.sqrt(1 - at)

  loss = diffusion.ddpm_loss(jax.random.key(1), eps, x, x, alphas_cumprod=a, t_max=300)
  assert float(loss) < 1e-6
  loss0 = diffusion.ddpm_loss(
    jax.random.key(1), lambda p, x_t, t: jnp.zeros_like(x_t), x, x, alphas_cumprod=a
  )
  assert 0.8 < float(loss0) < 1.2  # E|eps|^2 = 1
