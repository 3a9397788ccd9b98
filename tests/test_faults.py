"""Fault suite: each failure a user can run into, done for real.

Concurrent writers, mismatched resume, corrupted rows, a model with non-finite
outputs, unwritable output and ``kill -9`` during certify / predict / train.
Tiny models and tiny N keep each case to a few seconds.
"""

import math

import numpy as np
import pytest
from flax import nnx

from rsjax import training


class NanAfter(nnx.Module):
  """Linear classifier whose logits become NaN when the batch mean exceeds ``threshold``."""

  def __init__(self, din, num_classes, *, threshold=math.inf, rngs):
    self.lin = nnx.Linear(din, num_classes, rngs=rngs)
    self.threshold = threshold

  def __call__(self, x):
    import jax.numpy as jnp
    x = x.reshape(x.shape[0], -1)
    bad = jnp.mean(x, axis=1, keepdims=True) > self.threshold
    return jnp.where(bad, jnp.nan, self.lin(x))


def _digits(n=64):
  rng = np.random.default_rng(0)
  x = rng.uniform(0, 1, (n, 4, 4, 1)).astype(np.float32)
  y = (x.reshape(n, -1).mean(1) > 0.5).astype(np.int32)
  return x, y


def test_train_non_finite_loss_stops_and_names_the_step(tmp_path):
  x, y = _digits()
  # Inputs with mean > 0.55 give NaN logits: the first batch that holds one.
  model = NanAfter(16, 2, threshold=0.55, rngs=nnx.Rngs(0))
  with pytest.raises(FloatingPointError, match=r"non-finite .* at step 1 \(epoch 1, batch 1 of 4\)"):
    training.train(0, model, (x, y), sigma=0.0, epochs=2, batch_size=16, workdir=tmp_path / "w",
                   progress=False)
  assert not (tmp_path / "w" / "checkpoints" / "1").exists()


def test_train_finite_loss_runs(tmp_path):
  x, y = _digits()
  model = NanAfter(16, 2, rngs=nnx.Rngs(0))
  _, history = training.train(0, model, (x, y), sigma=0.1, epochs=1, batch_size=16,
                              progress=False)
  assert math.isfinite(history[0]["train_loss"])


def _nan_apply(params, x):
  """Linear logits, NaN for noisy inputs whose first pixel exceeds 0.9."""
  import jax.numpy as jnp
  x = x.reshape(x.shape[0], -1)
  return jnp.where(x[:, :1] > 0.9, jnp.nan, x @ params)


@pytest.mark.parametrize("fn", ["certify", "predict", "sample_counts"])
def test_non_finite_logits_raise_naming_the_ids(fn):
  import rsjax
  w = np.random.default_rng(0).normal(size=(16, 3)).astype(np.float32)
  x = np.full((4, 16), 0.1, np.float32)
  x[2, 0] = 0.95  # input with id 7 gives NaN logits
  kw = dict(sigma=0.01, num_classes=3, ids=np.array([5, 6, 7, 8]), batch_size=64)
  kw.update({"certify": dict(n0=10, n=100), "predict": dict(n=100),
             "sample_counts": dict(num=100)}[fn])
  with pytest.raises(FloatingPointError, match=r"NaN or inf logits .* ids \[7\]"):
    getattr(rsjax, fn)(0, _nan_apply, w, x, **kw)
  x[2, 0] = 0.5  # all finite: counts as usual
  out = getattr(rsjax, fn)(0, _nan_apply, w, x, **kw)
  assert len(out) == 4


def test_unbatched_input_gets_a_clear_error():
  import rsjax
  from rsjax import models
  apply_fn, params = models.to_apply_fn(
      models.create_model("mlp", num_classes=10, input_shape=(8, 8, 1), rngs=0))
  with pytest.raises(ValueError, match=r"add a batch axis, x\[None\]"):
    rsjax.certify(0, apply_fn, params, np.zeros((8, 8, 1), np.float32), sigma=0.25,
                  num_classes=10, n0=10, n=100)
