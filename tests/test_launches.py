"""Launches and host round trips per certified image: a small constant, whatever N.

CERTIFY runs each pass (selection n0, estimation n) as one compiled program: a
device-side loop over every sample chunk of every input, counts kept on the
device. Both passes are dispatched before the host waits, and the host reads
the counts of both in one read. These tests count the engine's launches (a counter on
the compiled call) and the device-to-host transfers (every explicit
``jax.device_get``; implicit reads are disallowed by ``jax.transfer_guard_device_to_host``),
so a change that launches per noise batch or syncs per batch fails here.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rsjax
from rsjax.engine import counts as _sampling


def _apply(params, x):
  return jnp.tanh(x.reshape(x.shape[0], -1) - 0.5) @ params


@pytest.fixture
def counted(monkeypatch):
  calls = {"launch": 0, "to_host": 0}
  launch, get = _sampling._counts_jit, jax.device_get

  def counting_launch(*a, **k):
    calls["launch"] += 1
    return launch(*a, **k)

  def counting_get(x):
    # A read of device arrays (device_get of host values is no transfer).
    calls["to_host"] += any(isinstance(a, jax.Array) for a in jax.tree.leaves(x))
    return get(x)

  monkeypatch.setattr(_sampling, "_counts_jit", counting_launch)
  monkeypatch.setattr(jax, "device_get", counting_get)
  return calls


@pytest.mark.parametrize(
  "num_inputs, n, batch_size", [(1, 500, 100), (1, 20_000, 100), (6, 4_000, 250)]
)
def test_certify_is_two_launches_and_one_wait_whatever_n(counted, num_inputs, n, batch_size):
  w = jnp.asarray(np.random.default_rng(0).normal(size=(6, 3)), jnp.float32)
  x = np.random.default_rng(1).uniform(size=(num_inputs, 6)).astype(np.float32)
  with jax.transfer_guard_device_to_host("disallow"):  # no implicit read of a device array
    cert = rsjax.certify(
      0, _apply, w, x, sigma=0.5, num_classes=3, n0=50, n=n, batch_size=batch_size
    )
  assert cert.counts.sum() == num_inputs * n  # every sample was counted
  steps = -(-n // batch_size) * num_inputs
  assert steps >= 5  # many noise batches ...
  assert counted["launch"] == 2  # ... in one launch per pass
  assert counted["to_host"] == 1  # one read of both passes' counts, after both were dispatched


def test_both_passes_are_dispatched_before_the_host_waits(monkeypatch):
  # The order of events: launch, launch, read, read (not launch, read, launch, read).
  events = []
  launch, result = _sampling._counts_jit, _sampling.PendingCounts.result

  def logged_launch(*a, **k):
    events.append("launch")
    return launch(*a, **k)

  def logged_result(self):
    events.append("read")
    return result(self)

  monkeypatch.setattr(_sampling, "_counts_jit", logged_launch)
  monkeypatch.setattr(_sampling.PendingCounts, "result", logged_result)
  w = jnp.ones((4, 2), jnp.float32)
  rsjax.certify(
    1,
    _apply,
    w,
    np.zeros((2, 4), np.float32),
    sigma=0.5,
    num_classes=2,
    n0=20,
    n=200,
    batch_size=50,
  )
  assert events[:2] == ["launch", "launch"] and set(events[2:]) == {"read"}


def test_sample_counts_is_one_launch(counted):
  w = jnp.ones((4, 2), jnp.float32)
  with jax.transfer_guard_device_to_host("disallow"):
    rsjax.sample_counts(
      2, _apply, w, np.zeros((3, 4), np.float32), sigma=0.5, num_classes=2, num=3_000, batch_size=64
    )
  assert counted == {"launch": 1, "to_host": 1}


@pytest.mark.parametrize("num, chains, m", [(200, 20, 30), (5_000, 50, 120)])
def test_srs_sampling_is_one_launch_whatever_the_chunks(counted, monkeypatch, num, chains, m):
  """SRS (``rsjax.srs.srs_sample``): the warm-started chains of every chunk, the warm-up and
  the check solves of every input run in one compiled program, the warm start carried on the
  device; the host reads the results once."""
  from golden_cases import LinearDEQ

  from rsjax.srs import _srs

  launch, calls = _srs._srs_jit, []

  def counting_launch(*a, **k):
    calls.append(1)
    return launch(*a, **k)

  monkeypatch.setattr(_srs, "_srs_jit", counting_launch)
  d = 4
  params = {
    "A": 0.5 * jnp.eye(d),
    "W": jnp.ones((d, 3)),
    "v": jnp.arange(d, dtype=jnp.float32),
    "b": jnp.float32(-1.0),
  }
  step = rsjax.models.SolverConfig(name="anderson", steps=3)
  config = rsjax.srs.SRSConfig(
    solver=step, warmup=step.replace(steps=10), check_solver=step.replace(steps=30), m=m
  )
  x = np.random.default_rng(0).uniform(size=(2, 3)).astype(np.float32)
  with jax.transfer_guard_device_to_host("disallow"):
    out = rsjax.srs.srs_sample(
      0,
      LinearDEQ(),
      params,
      x,
      sigma=0.5,
      num_classes=2,
      num=num,
      config=config,
      settings=rsjax.Sampling(batch_size=chains),
      check_key=1,
    )
  assert out.counts.sum() == 2 * num and num // chains >= 10  # many chunks, every sample counted
  assert (out.check_labels >= 0).all() and out.check_labels.shape == (2, m)
  assert len(calls) == 1 and counted["to_host"] == 1
