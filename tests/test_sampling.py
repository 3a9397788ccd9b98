"""The counts engine: reproducibility, device sharding, compilation, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rsjax
from rsjax.engine import counts as _sampling

NUM_CLASSES = 5


def init_mlp(seed, d_in, hidden=16):
  rng = np.random.default_rng(seed)
  return {
    "w1": jnp.asarray(rng.normal(size=(d_in, hidden)) / np.sqrt(d_in), jnp.float32),
    "b1": jnp.zeros((hidden,), jnp.float32),
    "w2": jnp.asarray(rng.normal(size=(hidden, NUM_CLASSES)), jnp.float32),
  }


def mlp_apply(params, x):
  h = jnp.tanh(x.reshape(x.shape[0], -1) @ params["w1"] + params["b1"])
  return h @ params["w2"]


def cnn_apply(params, x):
  y = jax.lax.conv_general_dilated(
    x, params["k"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
  )
  y = jax.nn.relu(y).mean(axis=(1, 2))
  return y @ params["w"]


@pytest.fixture(scope="module")
def data():
  rng = np.random.default_rng(0)
  x = rng.uniform(size=(13, 6)).astype(np.float32)
  return init_mlp(1, 6), x


def counts(x, params, **kw):
  kw.setdefault("sigma", 0.5)
  kw.setdefault("num", 700)
  kw.setdefault("batch_size", 128)
  return np.asarray(rsjax.sample_counts(42, mlp_apply, params, x, num_classes=NUM_CLASSES, **kw))


def test_counts_shape_and_total(data):
  params, x = data
  c = counts(x, params)
  assert c.shape == (13, NUM_CLASSES) and c.dtype == np.int32
  assert np.all(c.sum(1) == 700)
  assert np.all((c > 0).sum(1) >= 2)  # the noise actually changes predictions


@pytest.mark.parametrize("batch_size", [1, 7, 100, 700, 5000])
def test_counts_identical_across_batch_sizes(data, batch_size):
  params, x = data
  np.testing.assert_array_equal(
    counts(x, params, batch_size=batch_size), counts(x, params, batch_size=256)
  )


def test_counts_identical_across_splits_and_orders(data):
  params, x = data
  full = counts(x, params)
  ids = np.arange(13)
  part1 = counts(x[:5], params, ids=ids[:5])
  part2 = counts(x[5:], params, ids=ids[5:])
  np.testing.assert_array_equal(np.concatenate([part1, part2]), full)
  perm = np.random.default_rng(3).permutation(13)
  shuffled = counts(x[perm], params, ids=ids[perm])
  np.testing.assert_array_equal(shuffled, full[perm])


@pytest.mark.parametrize(
  "variant", [dict(batch_size=7), dict(batch_size=700), dict(devices=3), dict(split=True)]
)
def test_fast_stream_counts_identical_across_batch_splits_devices(data, variant):
  # The cheaper Gaussian stream keeps every reproducibility property.
  params, x = data
  ref = counts(x, params, noise="gaussian_fast")
  assert not np.array_equal(ref, counts(x, params))  # it is another stream
  if variant.get("split"):
    ids = np.arange(13)
    got = np.concatenate(
      [
        counts(x[:4], params, ids=ids[:4], noise="gaussian_fast"),
        counts(x[4:], params, ids=ids[4:], noise="gaussian_fast"),
      ]
    )
  else:
    got = counts(x, params, noise="gaussian_fast", **variant)
  np.testing.assert_array_equal(got, ref)


def test_single_input_is_sharded_over_devices():
  plan = _sampling.make_chunk_plan(1, 100_000, 1000, 4)
  assert plan.steps == 100 and plan.steps_per_device == 25


def test_cnn_counts_reproducible():
  rng = np.random.default_rng(5)
  params = {
    "k": jnp.asarray(rng.normal(size=(3, 3, 1, 4)), jnp.float32),
    "w": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32),
  }
  x = rng.uniform(size=(3, 8, 8, 1)).astype(np.float32)
  kw = dict(sigma=0.3, num_classes=3, num=300)
  a = rsjax.sample_counts(9, cnn_apply, params, x, batch_size=64, **kw)
  b = rsjax.sample_counts(9, cnn_apply, params, x, batch_size=300, devices=1, **kw)
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_keys_matter(data):
  params, x = data
  a = rsjax.sample_counts(1, mlp_apply, params, x, sigma=0.5, num_classes=5, num=500)
  b = rsjax.sample_counts(2, mlp_apply, params, x, sigma=0.5, num_classes=5, num=500)
  c = rsjax.sample_counts(
    jax.random.key(1), mlp_apply, params, x, sigma=0.5, num_classes=5, num=500
  )
  assert not np.array_equal(np.asarray(a), np.asarray(b))
  np.testing.assert_array_equal(np.asarray(a), np.asarray(c))


def test_per_input_sigma(data):
  params, x = data
  sig = np.linspace(0.1, 1.0, 13).astype(np.float32)
  c = counts(x, params, sigma=sig)
  # Same as certifying each input alone with its scalar sigma.
  for i in (0, 6, 12):
    np.testing.assert_array_equal(
      c[i], counts(x[i : i + 1], params, sigma=float(sig[i]), ids=[i])[0]
    )


def test_no_recompilation_for_a_second_batch(data):
  params, x = data
  counts(x, params, num=300)
  size = _sampling._counts_jit._cache_size()
  counts(x[::-1].copy() * 0.5, params, num=300, sigma=0.3)
  counts(x + 0.1, params, num=300, ids=np.arange(100, 113))
  assert _sampling._counts_jit._cache_size() == size


def test_certify_no_recompilation(data):
  params, x = data
  kw = dict(sigma=0.5, num_classes=NUM_CLASSES, n0=50, n=300, batch_size=100)
  rsjax.certify(0, mlp_apply, params, x, **kw)
  size = _sampling._counts_jit._cache_size()
  rsjax.certify(1, mlp_apply, params, x * 0.9, **kw)
  assert _sampling._counts_jit._cache_size() == size


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
  "kwargs, match",
  [
    (dict(x=np.zeros((6,), np.float32)), "x must have shape"),
    (dict(x=np.full((2, 6), np.nan, np.float32)), "NaN"),
    (dict(x=np.full((2, 6), np.inf, np.float32)), "NaN or inf"),
    (dict(sigma=0.0), "sigma"),
    (dict(sigma=-1.0), "sigma"),
    (dict(sigma=np.ones((3,), np.float32)), "sigma"),
    (dict(sigma=np.array([0.5, 0.0], np.float32)), "sigma"),
    (dict(alpha=0.0), "alpha"),
    (dict(alpha=1.0), "alpha"),
    (dict(alpha=2.0), "alpha"),
    (dict(n0=0), "n0"),
    (dict(n=0), "n must"),
    (dict(num_classes=3), "num_classes"),
    (dict(ids=[0]), "ids"),
    (dict(ids=[-1, 2]), "ids"),
    (dict(batch_size=0), "batch_size"),
    (dict(noise="cauchy"), "noise"),
  ],
)
def test_bad_input_raises_value_error(kwargs, match):
  params = init_mlp(0, 6)
  args = dict(
    x=np.zeros((2, 6), np.float32),
    sigma=0.5,
    num_classes=NUM_CLASSES,
    n0=10,
    n=20,
    alpha=0.01,
    batch_size=10,
  )
  args.update(kwargs)
  x = args.pop("x")
  with pytest.raises(ValueError, match=match):
    rsjax.certify(0, mlp_apply, params, x, **args)


def test_bad_key():
  with pytest.raises(ValueError, match="key"):
    rsjax.sample_counts(
      "seed",
      mlp_apply,
      init_mlp(0, 6),
      np.zeros((1, 6)),
      sigma=0.5,
      num_classes=NUM_CLASSES,
      num=10,
    )


def test_warns_when_n_can_never_certify():
  with pytest.warns(UserWarning, match="never certify"):
    cert = rsjax.certify(
      0,
      mlp_apply,
      init_mlp(0, 6),
      np.zeros((1, 6), np.float32),
      sigma=0.5,
      num_classes=NUM_CLASSES,
      n0=5,
      n=5,
    )
  assert cert.prediction[0] == -1


@pytest.mark.parametrize(
  "fields",
  [
    {},
    {"n0": 7, "n": 300, "alpha": 0.01, "noise": "uniform_linf"},
    {"noise": "gaussian_8bit", "precision": "bfloat16"},
    {"noise": "laplace", "precision": "tf32", "batch_size": 64},
  ],
)
def test_a_record_gives_back_its_settings(fields):
  """``Sampling.from_record`` inverts ``record.run_sampling`` (speed-only fields given), and
  the record's JSON gives back the same value."""
  from rsjax.records.sampling import RunSampling
  from rsjax.runs import record

  s = rsjax.Sampling(**fields)
  rec = record.run_sampling(s, pack=2)
  assert "batch_size" not in rec.to_json() and rec.pack == 2
  assert RunSampling.from_json(rec.to_json()) == rec
  assert rsjax.Sampling.from_record(rec, batch_size=s.batch_size) == s
  assert rsjax.Sampling.from_record(rec).batch_size == rsjax.Sampling().batch_size
  assert "pack" not in record.run_sampling(s).to_json()  # unpacked records read as before
