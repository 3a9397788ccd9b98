"""``rsjax.certify`` and ``rsjax.predict`` refuse the silent pitfalls of a first call: images
outside [0, 1] (a uint8 image in 0-255 puts sigma in the wrong units) unless told the scale,
``n < n0`` (every row would abstain), an NNX module passed as ``apply_fn``; they say what they
draw with ``progress=True`` (silent by default)."""

import jax.numpy as jnp
import numpy as np
import pytest

import rsjax

C = 3
W = jnp.asarray(np.random.default_rng(0).normal(size=(6, C)), jnp.float32)


def apply_fn(params, x):
  return x.reshape(x.shape[0], -1) @ params


def _x(scale=1.0, dtype=np.float32):
  """Two 1 x 2 x 3 images."""
  return (np.random.default_rng(1).uniform(size=(2, 1, 2, 3)) * scale).astype(dtype)


SMALL = dict(num_classes=C, n0=8, n=32, batch_size=16)


@pytest.mark.parametrize("call", [rsjax.certify, rsjax.predict])
def test_images_in_0_255_are_refused_unless_told_the_scale(call):
  x = _x(255.0, np.uint8)
  with pytest.raises(ValueError, match=r"outside input_range=\(0.0, 1.0\) \(uint8 pixels"):
    call(0, apply_fn, W, x, sigma=0.25, **SMALL)
  call(0, apply_fn, W, x, sigma=0.25 * 255, input_range=(0, 255), **SMALL)
  call(0, apply_fn, W, x - 128.0, sigma=0.25, input_range=None, **SMALL)


def test_feature_vectors_have_no_scale_to_check():
  x = np.random.default_rng(2).normal(size=(2, 6)).astype(np.float32) * 10
  rsjax.certify(0, apply_fn, W, x, sigma=0.25, **SMALL)
  with pytest.raises(ValueError, match="outside input_range"):
    rsjax.certify(0, apply_fn, W, np.full((2, 6), 255, np.uint8), sigma=0.25, **SMALL)


def test_normalized_images_are_refused_a_perturbed_image_is_not():
  x = _x()
  with pytest.raises(ValueError, match="outside input_range"):
    rsjax.certify(0, apply_fn, W, (x - 0.1307) / 0.3081, sigma=0.25, **SMALL)  # MNIST's
  rsjax.certify(0, apply_fn, W, x + 0.2, sigma=0.25, **SMALL)


def test_the_range_check_changes_no_count():
  x = _x()
  a = rsjax.certify(0, apply_fn, W, x, sigma=0.25, **SMALL)
  b = rsjax.certify(0, apply_fn, W, x, sigma=0.25, input_range=None, **SMALL)
  assert np.array_equal(a.prediction, b.prediction) and np.array_equal(a.radius, b.radius)


def test_n_below_n0_is_refused():
  with pytest.raises(ValueError, match=r"n=8 is smaller than n0=100.*swapped"):
    rsjax.certify(0, apply_fn, W, _x(), sigma=0.25, num_classes=C, n=8)


def test_an_nnx_module_as_apply_fn_names_the_mistake():
  from flax import nnx

  model = nnx.Linear(6, C, rngs=nnx.Rngs(0))
  for call in (rsjax.certify, rsjax.predict):
    with pytest.raises(TypeError, match=r"apply_fn is an NNX module \(Linear\).*to_apply_fn"):
      call(0, model, None, _x(), sigma=0.25, **SMALL)


def test_progress_is_off_by_default_and_says_what_it_draws(capsys):
  rsjax.certify(0, apply_fn, W, _x(), sigma=0.25, **SMALL)
  assert capsys.readouterr().err == ""
  rsjax.certify(0, apply_fn, W, _x(), sigma=0.25, progress=True, **SMALL)
  err = capsys.readouterr().err.splitlines()
  assert err[0] == "rsjax.certify: 2 inputs x (n0 8 + n 32) noisy samples ..."
  assert err[1].startswith("rsjax.certify: done in ")
  rsjax.predict(0, apply_fn, W, _x(), sigma=0.25, progress=True, **SMALL)
  assert capsys.readouterr().err.startswith("rsjax.predict: 2 inputs x n 32 noisy samples")
