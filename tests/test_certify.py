"""Soundness of certify on linear base classifiers, where the exact radius is known.

For a binary linear classifier ``f(x) = 1[w.x + b > 0]`` the Gaussian-smoothed
classifier equals ``f`` and its exact L2 radius is the distance to the hyperplane,
``|w.x + b| / ||w||`` (with true ``p_A = Phi(distance / sigma)``). For a classifier
that looks at one coordinate, Laplace and uniform smoothing certify exactly the L1
distance ``|x_1|`` at the true ``p_A``.
"""

import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats as st

import rsjax

D = 8


def allowed_failures(num, alpha):
  """Coverage failures a sound bound may show on ``num`` independent inputs.

  Each input fails (p_lower above the true p_A) with probability <= alpha, so more
  than this many failures has probability < 1e-4 for a sound procedure.
  """
  return int(st.binom.ppf(1 - 1e-4, num, alpha))


def linear_apply(params, x):
  w, b = params
  z = x.reshape(x.shape[0], -1) @ w + b
  return jnp.stack([-z, z], axis=-1)


def make_linear_problem(num, rng, dist_range):
  w = rng.normal(size=D).astype(np.float32)
  w /= np.linalg.norm(w)
  b = np.float32(0.1)
  base = rng.normal(size=(num, D)).astype(np.float32)
  base -= ((base @ w + b)[:, None]) * w[None]  # project onto the hyperplane
  signed = rng.uniform(*dist_range, size=num) * rng.choice([-1.0, 1.0], size=num)
  x = base + signed[:, None].astype(np.float32) * w[None]
  true_dist = np.abs(x.astype(np.float64) @ w.astype(np.float64) + b)
  label = (x @ w + b > 0).astype(int)
  return (jnp.asarray(w), jnp.asarray(b)), x, true_dist, label


@pytest.mark.slow
def test_gaussian_linear_soundness_and_tightness():
  rng = np.random.default_rng(0)
  sigma = 0.5
  # True p_A = Phi(d / sigma) in [0.6, 0.999] <=> d in [0.127, 1.545].
  params, x, dist, label = make_linear_problem(
    300, rng, (sigma * st.norm.ppf(0.6), sigma * st.norm.ppf(0.999))
  )
  cert = rsjax.certify(
    7,
    linear_apply,
    params,
    x,
    sigma=sigma,
    num_classes=2,
    n0=100,
    n=100_000,
    alpha=0.001,
    batch_size=10_000,
  )
  certified = cert.prediction != -1
  # No wrong class certified; no radius above the exact one.
  assert np.all(cert.prediction[certified] == label[certified])
  assert np.all(cert.radius <= dist + 1e-6), np.max(cert.radius - dist)
  # Tightness. CERTIFY abstains when its n0 = 100 selection samples pick the
  # wrong class, which happens with probability up to ~2% at p_A = 0.6; the
  # estimate is then never used. Every input whose selection was right must reach
  # 85% of the exact radius.
  selected_right = cert.counts_selection.argmax(1) == label
  assert np.mean(~selected_right) <= 0.02
  ratio = cert.radius[selected_right] / dist[selected_right]
  print(
    f"tightness: min {ratio.min():.4f} median {np.median(ratio):.4f}; "
    f"wrong selections {np.sum(~selected_right)}"
  )
  assert ratio.min() >= 0.85
  # Multiclass form (simultaneous bounds) is sound too.
  cm = rsjax.certificate_from_counts(
    cert.counts_selection,
    cert.counts,
    n=100_000,
    alpha=0.001,
    scale=np.full(len(x), sigma),
    dim=D,
    multiclass=True,
  )
  assert np.all(cm.radius <= dist + 1e-6)
  assert np.all(cm.prediction[cm.prediction != -1] == label[cm.prediction != -1])


def test_gaussian_linear_soundness_near_boundary():
  # Inputs close to the boundary (p_A in [0.5, 0.6]) and on the far side: many abstentions,
  # never a wrong class or a radius above the distance.
  rng = np.random.default_rng(1)
  sigma = 0.25
  params, x, dist, label = make_linear_problem(400, rng, (0.0, 0.06))
  cert = rsjax.certify(
    3,
    linear_apply,
    params,
    x,
    sigma=sigma,
    num_classes=2,
    n0=50,
    n=2_000,
    alpha=0.001,
    batch_size=2_000,
  )
  certified = cert.prediction != -1
  failures = (cert.radius > dist + 1e-6) | (certified & (cert.prediction != label))
  assert failures.sum() <= allowed_failures(len(x), 0.001)
  assert np.mean(certified) < 0.9  # the problem is hard: some must abstain


def axis_apply(params, x):
  z = x.reshape(x.shape[0], -1)[:, 0] * params
  return jnp.stack([-z, z], axis=-1)


@pytest.mark.parametrize("noise", ["laplace", "uniform", "uniform_linf"])
def test_other_noises_axis_classifier_sound_and_tight(noise):
  rng = np.random.default_rng(2)
  lam = 0.5
  t = rng.uniform(0.05, 0.45, size=120)
  x = np.zeros((120, 4), np.float32)
  x[:, 0] = t * rng.choice([-1, 1], size=120)
  x[:, 1:] = rng.uniform(size=(120, 3))
  label = (x[:, 0] > 0).astype(int)
  cert = rsjax.certify(
    5,
    axis_apply,
    jnp.float32(1.0),
    x,
    sigma=lam,
    num_classes=2,
    n0=100,
    n=20_000,
    alpha=0.001,
    batch_size=20_000,
    noise=noise,
  )
  certified = cert.prediction != -1
  assert certified.mean() > 0.9
  # The L1 (and Linf) distance to the boundary is |x_1|.
  failures = (cert.radius > np.abs(x[:, 0]) + 1e-6) | (certified & (cert.prediction != label))
  assert failures.sum() <= allowed_failures(len(x), 0.001)
  if noise != "uniform_linf":
    assert np.median(cert.radius[certified] / np.abs(x[certified, 0])) > 0.8
  assert cert.norm == {"laplace": "l1", "uniform": "l1", "uniform_linf": "linf"}[noise]


def test_predict_abstains_at_the_expected_rate_on_a_5050_input():
  # f looks at x_1 = 0 exactly: each class has probability 1/2, so PREDICT must abstain
  # except with probability <= alpha (the binomial test's level).
  x = np.zeros((400, 3), np.float32)
  alpha = 0.1
  pred = rsjax.predict(
    11,
    axis_apply,
    jnp.float32(1.0),
    x,
    sigma=0.5,
    num_classes=2,
    n=500,
    alpha=alpha,
    batch_size=500,
  )
  rate = np.mean(pred != -1)
  print(f"non-abstention rate at alpha={alpha}: {rate:.3f}")
  assert rate <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / 400)
  assert rate >= 0.02  # the test is not vacuous either


def test_predict_clear_inputs():
  x = np.zeros((6, 3), np.float32)
  x[:, 0] = [-2, -1, -0.5, 0.5, 1, 2]
  pred = rsjax.predict(
    0, axis_apply, jnp.float32(1.0), x, sigma=0.25, num_classes=2, n=1000, alpha=0.001
  )
  np.testing.assert_array_equal(pred, [0, 0, 0, 1, 1, 1])


def test_certificate_fields_and_guarantee():
  x = np.zeros((3, 3), np.float32)
  x[:, 0] = [-1.0, 0.0, 1.0]
  cert = rsjax.certify(1, axis_apply, jnp.float32(1.0), x, sigma=0.5, num_classes=2, n0=100, n=1000)
  assert cert.prediction.shape == (3,) and cert.radius.shape == (3,)
  assert cert.counts.shape == (3, 2) and cert.counts.sum(1).tolist() == [1000] * 3
  assert cert.counts_selection.sum(1).tolist() == [100] * 3
  assert cert.radius.dtype == np.float64
  assert "Clopper-Pearson" in cert.guarantee
  assert cert.radius[1] == 0.0 or cert.prediction[1] != -1
  assert cert.prediction[0] == 0 and cert.prediction[2] == 1


def test_anisotropic_sigma_uses_min_scale():
  x = np.zeros((2, 3), np.float32)
  x[:, 0] = [0.8, -0.8]
  sig = np.array([[0.5, 1.0, 2.0], [0.5, 0.7, 0.9]], np.float32)
  cert = rsjax.certify(2, axis_apply, jnp.float32(1.0), x, sigma=sig, num_classes=2, n=5000)
  want = 0.5 * st.norm.ppf(cert.p_lower)
  np.testing.assert_allclose(cert.radius, want, rtol=1e-12)
  assert "anisotropic" in cert.guarantee


def test_sampling_settings_equal_the_keyword_form():
  rng = np.random.default_rng(5)
  w = rng.normal(size=D).astype(np.float32)
  params = (w, np.float32(0.0))
  x = rng.normal(size=(3, D)).astype(np.float32)
  settings = rsjax.Sampling(n0=20, n=500, alpha=0.01, batch_size=128)
  a = rsjax.certify(3, linear_apply, params, x, sigma=0.5, num_classes=2, settings=settings)
  b = rsjax.certify(
    3, linear_apply, params, x, sigma=0.5, num_classes=2, n0=20, n=500, alpha=0.01, batch_size=128
  )
  np.testing.assert_array_equal(a.counts, b.counts)
  np.testing.assert_array_equal(a.radius, b.radius)
  assert a.sound and b.sound
  # Keywords override the settings object; unknown ones and bad values are refused.
  c = rsjax.certify(3, linear_apply, params, x, sigma=0.5, num_classes=2, settings=settings, n=300)
  assert c.counts.sum() == 3 * 300
  with pytest.raises(TypeError, match="sampling settings"):
    rsjax.certify(3, linear_apply, params, x, sigma=0.5, num_classes=2, n_max=300)
  with pytest.raises(ValueError, match="alpha"):
    rsjax.Sampling(alpha=1.5)
  with pytest.raises(ValueError, match="n0"):
    rsjax.Sampling(n0=0)
