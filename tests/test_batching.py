"""rsjax.engine.batching: the automatic step size."""

import jax.numpy as jnp
import numpy as np
import pytest

import rsjax
from rsjax.engine import batching


def _mlp(params, x):
  h = jnp.tanh(x.reshape(x.shape[0], -1) @ params["w1"])
  return h @ params["w2"]


def _params(d, h=32, c=4):
  rs = np.random.RandomState(0)
  return {
    "w1": jnp.asarray(rs.normal(size=(d, h)), jnp.float32),
    "w2": jnp.asarray(rs.normal(size=(h, c)), jnp.float32),
  }


def test_probe_reports_memory_and_flops():
  p = batching.probe_step(_mlp, _params(64), (8, 8), batch=16)
  assert p.batch == 16
  # At least the input and the noise of every sample, at most a few times the activations.
  assert 64 * 4 <= p.bytes_per_sample < 64 * 4 * 50
  assert p.param_bytes >= (64 * 32 + 32 * 4) * 4
  assert p.flops_per_sample >= 2 * 64 * 32  # the first matmul alone


def test_auto_batch_size_follows_the_budget_and_the_caps():
  params = _params(64)
  p = batching.probe_step(_mlp, params, (8, 8))
  # A budget of ~10 samples gives ~10 samples; a huge budget hits the CPU cap.
  small = batching.auto_batch_size(
    _mlp, params, (8, 8), num=100_000, cpu_budget_bytes=int(10.5 * p.bytes_per_sample)
  )
  assert small == 10
  big = batching.auto_batch_size(_mlp, params, (8, 8), num=100_000, cpu_budget_bytes=2**40)
  assert big <= 1024 and big % 8 == 0 and big >= 1000
  # Bigger inputs need more memory per sample, so fewer fit in the same budget.
  params_big = _params(64 * 64)
  b_big = batching.auto_batch_size(
    _mlp, params_big, (64, 64), num=100_000, cpu_budget_bytes=64 * 2**20
  )
  b_small = batching.auto_batch_size(_mlp, params, (8, 8), num=100_000, cpu_budget_bytes=64 * 2**20)
  assert 1 <= b_big < b_small


def test_even_steps_keep_padding_small():
  assert batching.even_steps(1024, 100_000) == 1024  # 98 steps of 1021 -> 1024 (multiple of 8)
  assert batching.even_steps(1000, 1500) == 752  # 2 steps, not 1000 + 500
  assert batching.even_steps(512, 100) == 512  # several inputs share a step
  for batch, num in ((1000, 1500), (1024, 100_000), (300, 1001)):
    s = batching.even_steps(batch, num)
    assert s <= batch and -(-num // s) == -(-num // batch)


def test_auto_batch_in_sample_counts_gives_the_same_counts(getkey):
  params = _params(16, h=8, c=3)
  x = np.random.RandomState(1).rand(3, 4, 4).astype(np.float32)
  key = getkey()
  kw = dict(sigma=0.7, num_classes=3, num=700)
  auto = rsjax.sample_counts(key, _mlp, params, x, batch_size="auto", **kw)
  fixed = rsjax.sample_counts(key, _mlp, params, x, batch_size=96, **kw)
  np.testing.assert_array_equal(np.asarray(auto), np.asarray(fixed))
  assert np.all(np.asarray(auto).sum(1) == 700)


def test_bad_arguments():
  params = _params(16)
  with pytest.raises(ValueError, match="num"):
    batching.auto_batch_size(_mlp, params, (4, 4), num=0)
  with pytest.raises(ValueError, match="memory_fraction"):
    batching.auto_batch_size(_mlp, params, (4, 4), num=10, memory_fraction=0.0)
  with pytest.raises(ValueError, match="batch_size"):
    rsjax.sample_counts(
      0,
      _mlp,
      params,
      np.zeros((1, 4, 4), np.float32),
      sigma=0.5,
      num_classes=4,
      num=10,
      batch_size="big",
    )


def test_accelerator_budget_uses_bytes_limit():
  probe = batching.StepProbe(
    batch=16, bytes_per_sample=1e6, param_bytes=10**8, flops_per_sample=0.0
  )
  kw = dict(memory_fraction=0.5, cpu_budget_bytes=2**30, accelerator_cap=16384)
  stats = {"bytes_limit": 80 * 10**9, "bytes_in_use": 10**9}
  # 0.5 * 79e9 - 1e8 bytes at 1e6 per sample: 39,400 samples, capped at 16384.
  assert batching._batch_from_budget(probe, stats, 3072, **kw) == 16384
  stats = {"bytes_limit": 2 * 10**9, "bytes_in_use": 0}
  assert (
    batching._batch_from_budget(probe, stats, 3072, **kw) == 896
  )  # (1e9 - 1e8) / 1e6 -> 900 -> 896
  # No memory_stats (CPU): the fixed budget and the input-size cap.
  assert batching._batch_from_budget(probe, None, 3072, **kw) == 512
  assert batching._batch_from_budget(probe, None, 150528, **kw) == 256
  # Never below one sample, even when nothing fits.
  assert batching._batch_from_budget(probe, {"bytes_limit": 10}, 3072, **kw) == 1
