"""The composed base classifier ``classifier(denoise(x + delta))`` is certified soundly by every
method, as any other base classifier.

A linear classifier ``z = w.u + b`` behind an affine denoiser ``u = A y + c`` is the linear
classifier ``(A^T w).y + (w.c + b)``: its Gaussian-smoothed classifier equals it, and the exact
L2 radius at ``x`` is the distance ``|w'.x + b'| / ||w'||`` to its hyperplane.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from scipy import stats as st

import rsjax
from rsjax import idrs
from rsjax.models import denoise

D = 8


def linear_classifier(params, x):
  w, b = params
  z = x.reshape(x.shape[0], -1) @ w + b
  return jnp.stack([-z, z], axis=-1)


def affine_denoiser(params, y):
  a, c = params
  return y.reshape(y.shape[0], -1) @ a.T + c


def make_problem(num, seed, dist_range):
  """Inputs at known distances from the composed hyperplane."""
  rng = np.random.default_rng(seed)
  w = rng.normal(size=D).astype(np.float32)
  a = (np.eye(D) + 0.3 * rng.normal(size=(D, D))).astype(np.float32)
  c = (0.1 * rng.normal(size=D)).astype(np.float32)
  b = np.float32(0.05)
  w_eff = a.T.astype(np.float64) @ w
  b_eff = float(w.astype(np.float64) @ c + b)
  unit = w_eff / np.linalg.norm(w_eff)
  base = rng.normal(size=(num, D))
  base -= ((base @ w_eff + b_eff) / np.linalg.norm(w_eff))[:, None] * unit[None]
  signed = rng.uniform(*dist_range, size=num) * rng.choice([-1.0, 1.0], size=num)
  x = (base + signed[:, None] * unit[None]).astype(np.float32)
  xd = x.astype(np.float64)
  dist = np.abs(xd @ w_eff + b_eff) / np.linalg.norm(w_eff)
  label = (xd @ w_eff + b_eff > 0).astype(int)
  apply_fn, params = denoise.denoised(
    affine_denoiser,
    linear_classifier,
    denoiser_params=(jnp.asarray(a), jnp.asarray(c)),
    classifier_params=(jnp.asarray(w), jnp.asarray(b)),
  )
  return apply_fn, params, x, dist, label


def allowed_failures(num, alpha):
  return int(st.binom.ppf(1 - 1e-4, num, alpha))


def check_sound(cert, dist, label, *, alpha):
  certified = cert.prediction != -1
  assert np.all(cert.prediction[certified] == label[certified])
  # A sound radius exceeds the exact one with probability <= alpha per input.
  over = np.sum(cert.radius > dist + 1e-5)
  assert over <= allowed_failures(len(dist), alpha), over
  return certified


SIGMA = 0.5
KW = dict(n0=64, n=4000, alpha=0.01, batch_size=2000)


def test_identity_denoiser_gives_the_classifier_counts_exactly():
  rng = np.random.default_rng(1)
  w = jnp.asarray(rng.normal(size=D).astype(np.float32))
  params = (w, jnp.float32(0.1))
  x = rng.normal(size=(12, D)).astype(np.float32)
  apply_fn, both = denoise.denoised(None, linear_classifier, classifier_params=params)
  got = rsjax.certify(3, apply_fn, both, x, sigma=SIGMA, num_classes=2, **KW)
  want = rsjax.certify(3, linear_classifier, params, x, sigma=SIGMA, num_classes=2, **KW)
  np.testing.assert_array_equal(got.counts, want.counts)
  np.testing.assert_array_equal(got.counts_selection, want.counts_selection)
  np.testing.assert_array_equal(got.radius, want.radius)


def test_affine_denoiser_linear_classifier_cohen_and_multiclass_sound_and_tight():
  # True p_A = Phi(d / sigma) in [0.7, 0.99].
  apply_fn, params, x, dist, label = make_problem(
    200, 0, (SIGMA * st.norm.ppf(0.7), SIGMA * st.norm.ppf(0.99))
  )
  cert = rsjax.certify(5, apply_fn, params, x, sigma=SIGMA, num_classes=2, **KW)
  certified = check_sound(cert, dist, label, alpha=KW["alpha"])
  # Tight: at n = 4000 the Clopper-Pearson bound is close to p_A.
  assert np.mean(certified) >= 0.95
  ratio = cert.radius[certified] / dist[certified]
  assert np.median(ratio) >= 0.8, np.median(ratio)
  multi = rsjax.certify(5, apply_fn, params, x, sigma=SIGMA, num_classes=2, multiclass=True, **KW)
  check_sound(multi, dist, label, alpha=KW["alpha"])


def test_affine_denoiser_budgeted_and_idrs_sound():
  apply_fn, params, x, dist, label = make_problem(
    120, 1, (SIGMA * st.norm.ppf(0.6), SIGMA * st.norm.ppf(0.99))
  )
  budgeted = rsjax.certify(
    6, apply_fn, params, x, sigma=SIGMA, num_classes=2, budget=[0.25, 0.5, 0.75, 1.0], **KW
  )
  certified = budgeted.prediction != -1
  assert np.all(budgeted.prediction[certified] == label[certified])
  assert np.sum(budgeted.radius > dist + 1e-5) <= allowed_failures(len(dist), KW["alpha"])
  key = jax.random.key(7)
  got = idrs.certify(
    key, apply_fn, params, x, design=idrs.ConstantSigma(SIGMA), num_classes=2, **KW
  )
  want = rsjax.certify(key, apply_fn, params, x, sigma=SIGMA, num_classes=2, **KW)
  np.testing.assert_array_equal(got.counts, want.counts)
  check_sound(got, dist, label, alpha=KW["alpha"])


class _Scale(nnx.Module):
  """A tiny NNX 'denoiser': y -> 0.5 y + 0.25 (affine)."""

  def __init__(self):
    self.a = nnx.Param(jnp.float32(0.5))
    self.c = nnx.Param(jnp.float32(0.25))

  def __call__(self, y):
    return self.a * y + self.c


def test_nnx_modules_compose_and_match_the_function_form():
  rng = np.random.default_rng(2)
  classifier = rsjax.models.MLP(num_classes=3, input_shape=(4, 4, 1), rngs=nnx.Rngs(0))
  x = rng.random((6, 4, 4, 1)).astype(np.float32)
  apply_fn, params = denoise.denoised(_Scale(), classifier)
  c_fn, c_params = rsjax.models.to_apply_fn(classifier)
  np.testing.assert_allclose(
    np.asarray(apply_fn(params, x)),
    np.asarray(c_fn(c_params, 0.5 * x + 0.25)),
    rtol=1e-6,
    atol=1e-6,
  )
  cert = rsjax.certify(
    0, apply_fn, params, x, sigma=0.25, num_classes=3, n0=16, n=64, batch_size=64
  )
  assert cert.counts.shape == (6, 3) and np.all(cert.counts.sum(1) == 64)
  assert hash(apply_fn) == hash(denoise.denoised(_Scale(), classifier)[0])


def test_bad_arguments():
  with pytest.raises(ValueError, match="NNX module or a function"):
    denoise.denoised(None, 3)
  with pytest.raises(ValueError, match="params only with a function"):
    denoise.denoised(_Scale(), linear_classifier, denoiser_params=1)
