"""rsjax.engine.traced: the counts under jit / vmap equal the host driver's; the drivers refuse a
transformation with one line that names the function to use."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rsjax


def _linear(num_classes=3, dim=6, seed=0):
  w = jax.random.normal(jax.random.key(seed), (dim, num_classes))
  return (lambda p, x: x.reshape(x.shape[0], -1) @ p), w


def test_counts_equal_the_engine_and_certify():
  apply_fn, w = _linear()
  x = jax.random.uniform(jax.random.key(1), (4, 2, 3))
  key = jax.random.key(7)
  counts = jax.jit(
    functools.partial(
      rsjax.engine.traced.counts, apply_fn=apply_fn, num_classes=3, samples_per_step=32
    ),
    static_argnames="num",
  )
  ids = jnp.array([3, 0, 9, 5])
  for num in (100, 64, 5):
    c, bad = counts(key, w, x, sigma=0.5, num=num, ids=ids)
    ref = rsjax.sample_counts(
      key, apply_fn, w, x, sigma=0.5, num_classes=3, num=num, ids=np.asarray(ids), batch_size=50
    )
    np.testing.assert_array_equal(np.asarray(c), ref)
    assert np.asarray(c).sum() == 4 * num and not np.asarray(bad).any()
  # The documented recipe gives rsjax.certify's certificate.
  k0, k1 = jax.random.fold_in(key, 0), jax.random.fold_in(key, 1)
  c0, _ = counts(k0, w, x, sigma=0.5, num=50)
  c1, _ = counts(k1, w, x, sigma=0.5, num=400)
  cert = rsjax.certificate_from_counts(
    np.asarray(c0), np.asarray(c1), n=400, alpha=0.001, scale=np.full(4, 0.5), dim=6
  )
  ref = rsjax.certify(key, apply_fn, w, x, sigma=0.5, num_classes=3, n0=50, n=400)
  np.testing.assert_array_equal(cert.prediction, ref.prediction)
  np.testing.assert_allclose(cert.radius, ref.radius, rtol=0, atol=0)


def test_vmap_over_sigma_equals_one_call_per_sigma():
  apply_fn, w = _linear()
  x = jax.random.uniform(jax.random.key(1), (3, 6))
  key = jax.random.key(2)
  sigmas = jnp.array([0.1, 0.5, 1.0])
  fn = lambda s: rsjax.engine.traced.counts(  # noqa: E731
    key,
    w,
    x,
    apply_fn=apply_fn,
    sigma=s,
    num_classes=3,
    num=80,
  )[0]
  stacked = jax.jit(jax.vmap(fn))(sigmas)
  for i, s in enumerate([0.1, 0.5, 1.0]):
    np.testing.assert_array_equal(np.asarray(stacked[i]), np.asarray(fn(s)))


@pytest.mark.parametrize("transform", [jax.jit, jax.vmap])
def test_drivers_under_a_transformation_say_what_to_use(transform):
  apply_fn, w = _linear()
  x = jnp.ones((2, 6))
  certify = lambda x: rsjax.certify(0, apply_fn, w, x, sigma=0.25, num_classes=3)  # noqa: E731
  predict = lambda x: rsjax.predict(0, apply_fn, w, x, sigma=0.25, num_classes=3)  # noqa: E731
  counts = lambda x: rsjax.sample_counts(  # noqa: E731
    0,
    apply_fn,
    w,
    x,
    sigma=0.25,
    num_classes=3,
    num=10,
  )
  for name, fn in (
    ("rsjax.certify", certify),
    ("rsjax.predict", predict),
    ("rsjax.sample_counts", counts),
  ):
    arg = x if transform is jax.jit else x[:, None]
    with pytest.raises(
      TypeError,
      match=rf"{name} is the host-side driver .* call "
      r"rsjax.engine.traced.counts",
    ) as e:
      transform(fn)(arg)
    assert "\n" not in str(e.value)
