"""The children of a model (``rsjax.models``: int8 weights, pruning, bfloat16 weights)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rsjax import models
from rsjax.runs.runner import fingerprint


@pytest.fixture(scope="module")
def lenet():
  return models.create_model("lenet", num_classes=10, input_shape=(28, 28, 1), rngs=0)


def _kernels(model):
  return [np.asarray(p) for p in jax.tree.leaves(nnx.state(model, nnx.Param)) if p.ndim >= 2]


def test_int8_is_per_channel_symmetric_and_close(lenet):
  q = models.quantize_int8(lenet)
  for w, v in zip(_kernels(lenet), _kernels(q), strict=True):
    scale = np.abs(w).reshape(-1, w.shape[-1]).max(axis=0) / 127.0
    levels = v.reshape(-1, w.shape[-1]) / scale
    np.testing.assert_allclose(levels, np.round(levels), atol=1e-3)
    assert np.all(np.abs(levels) <= 127 + 1e-3)
    # each channel's largest weight is exactly a level: +-127
    np.testing.assert_allclose(np.abs(levels).max(axis=0), 127.0, rtol=1e-5)
    assert np.all(np.abs(v - w).reshape(-1, w.shape[-1]) <= scale / 2 + 1e-7)
  assert fingerprint(models.to_apply_fn(q)[1]) != fingerprint(models.to_apply_fn(lenet)[1])
  x = jnp.asarray(np.random.default_rng(0).random((8, 28, 28, 1)), jnp.float32)
  a, pa = models.to_apply_fn(lenet)
  b, pb = models.to_apply_fn(q)
  np.testing.assert_allclose(a(pa, x), b(pb, x), atol=0.05)


def test_pruning_zeroes_the_smallest_weights(lenet):
  p = models.prune_magnitude(lenet, 0.5)
  for w, v in zip(_kernels(lenet), _kernels(p), strict=True):
    zero = v == 0
    assert abs(zero.mean() - 0.5) <= 1.0 / w.size + 1e-9
    assert np.abs(w[zero]).max() <= np.abs(w[~zero]).min()
    np.testing.assert_array_equal(v[~zero], w[~zero])
  with pytest.raises(ValueError, match="sparsity"):
    models.prune_magnitude(lenet, 1.0)
  assert np.all(_kernels(models.prune_magnitude(lenet, 0.0))[0] == _kernels(lenet)[0])


def test_bfloat16_weights_round_every_parameter(lenet):
  b = models.bfloat16_weights(lenet)
  for w in jax.tree.leaves(nnx.state(b, nnx.Param)):
    w = np.asarray(w)
    np.testing.assert_array_equal(w, np.asarray(jnp.asarray(w).astype(jnp.bfloat16), np.float32))


def test_a_child_directory_loads_with_its_own_fingerprint(lenet, tmp_path):
  config = {"model": "lenet", "num_classes": 10, "input_shape": [28, 28, 1], "sigma": 0.25}
  child = models.quantize_int8(lenet)
  models.save_child(tmp_path / "int8", child, config, {"transform": "int8"})
  back, cfg = models.load_model(tmp_path / "int8")
  assert cfg["derived_from"] == {"transform": "int8"} and cfg["sigma"] == 0.25
  assert fingerprint(models.to_apply_fn(back)[1]) == fingerprint(models.to_apply_fn(child)[1])
