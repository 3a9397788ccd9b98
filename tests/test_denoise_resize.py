"""The resize stage between denoiser and classifier: bicubic, antialiased, as PyTorch's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rsjax.models.denoise import compose, denoised


@pytest.mark.parametrize("size", [(224, 224), (16, 16), (48, 40)])
def test_resize_equals_torch_bicubic_antialias(size):
  torch = pytest.importorskip("torch")
  x = np.random.default_rng(0).random((2, 32, 32, 3)).astype(np.float32)
  want = torch.nn.functional.interpolate(
    torch.tensor(x.transpose(0, 3, 1, 2)), size=size, mode="bicubic", antialias=True
  ).numpy()
  fn = compose.Resized(lambda p, u: u, size)
  got = np.asarray(fn(None, jnp.asarray(x))).transpose(0, 3, 1, 2)
  assert np.max(np.abs(got - want)) <= 1e-5  # measured 1.3e-6 (32 -> 224)


def test_denoised_with_resize_composes_denoiser_resize_classifier():
  x = jax.random.uniform(jax.random.key(0), (3, 8, 8, 1))
  w = jax.random.normal(jax.random.key(1), (16 * 16, 4))
  clf = lambda p, u: u.reshape(u.shape[0], -1) @ p  # noqa: E731
  apply_fn, params = denoised(
    lambda p, u: p * u, clf, denoiser_params=0.5, classifier_params=w, resize=(16, 16)
  )
  want = clf(w, jax.image.resize(0.5 * x, (3, 16, 16, 1), "bicubic", antialias=True))
  np.testing.assert_allclose(np.asarray(apply_fn(params, x)), np.asarray(want), rtol=1e-6)
  assert (
    apply_fn
    == denoised(
      apply_fn.denoise_fn, clf, denoiser_params=0.5, classifier_params=w, resize=(16, 16)
    )[0]
  )  # hashable and compared by value: a static argument of the engine
