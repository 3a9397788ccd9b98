"""The fixed work of one ``rsjax.certify`` call, without timing it.

A warm call (same shapes and settings, another key) compiles and traces
nothing; it waits for the device once (both passes' counts in one
``device_get``), places the parameters and the inputs once (not once per pass)
and folds its three keys in one launch that gives ``fold_in``'s keys (on one
device a model's uncommitted parameters go to the launch unplaced); the NNX
bridge hashes its graph definition once (``jax.jit`` hashes a static
``apply_fn`` on every call). ``benchmarks/configs/per_call.py`` times the same call.
"""

import pickle

import jax
import numpy as np
import pytest
from jax import monitoring

import rsjax
from rsjax import models
from rsjax.engine import transfer
from rsjax.models._bridge import EvalApply


@pytest.fixture(scope="module")
def mlp():
  model = models.create_model("mlp", num_classes=10, input_shape=(28, 28, 1), rngs=0)
  apply_fn, params = models.to_apply_fn(model)
  x = np.random.default_rng(0).random((1, 28, 28, 1), dtype=np.float32)
  return apply_fn, params, x


def _certify(mlp, seed):
  apply_fn, params, x = mlp
  return rsjax.certify(
    seed, apply_fn, params, x, sigma=0.25, num_classes=10, n0=100, n=1000, batch_size="auto"
  )


def test_warm_call_compiles_and_traces_nothing(mlp):
  _certify(mlp, 0)
  events = []

  def listen(name, *_, **__):
    if name.startswith("/jax/core/compile/"):
      events.append(name)

  monitoring.register_event_duration_secs_listener(listen)
  try:
    _certify(mlp, 1)
  finally:
    monitoring.unregister_event_duration_listener(listen)
  assert events == []


def test_one_wait_and_one_placement_per_call(mlp, monkeypatch):
  expected = _certify(mlp, 2)
  fetches, placed = [], []
  real_fetch, real_replicate = transfer.fetch, transfer.replicate

  def fetch(arrays):
    fetches.append(len(arrays))
    return real_fetch(arrays)

  def replicate(mesh, tree):
    placed.append(len(jax.tree.leaves(tree)))
    return real_replicate(mesh, tree)

  monkeypatch.setattr(transfer, "fetch", fetch)
  monkeypatch.setattr(transfer, "replicate", replicate)
  cert = _certify(mlp, 2)
  # One device_get of both passes' counts.
  assert fetches == [2]
  # The parameters once and (x, sigma, ids) once: the two passes of one image
  # pad it to the same length.
  n_params = len(jax.tree.leaves(mlp[1]))
  assert sorted(placed) == sorted([n_params, 3])
  np.testing.assert_array_equal(cert.counts, expected.counts)
  np.testing.assert_array_equal(cert.counts_selection, expected.counts_selection)
  np.testing.assert_array_equal(cert.radius, expected.radius)


def test_fold_keys_gives_fold_in_keys():
  key = jax.random.key(12345)
  got = transfer.fold_keys(key, (0, 1, 2))
  for i, k in enumerate(got):
    want = jax.random.fold_in(key, i)
    np.testing.assert_array_equal(jax.random.key_data(k), jax.random.key_data(want))


def test_resolve_all_matches_one_by_one(mlp):
  apply_fn, params, x = mlp
  xs, sig, ids = rsjax.engine.counts.prepare_inputs(np.concatenate([x, x * 0.5]), 0.25, None)

  def pending(i):
    return rsjax.engine.counts.dispatch_counts(
      jax.random.key(i), apply_fn, params, xs, sig, ids, num=64, num_classes=10, batch_size=32
    )

  one_by_one = [transfer.resolve_counts(pending(i)) for i in range(2)]
  together = transfer.resolve_all(pending(0), "not pending", pending(1))
  assert together[1] == "not pending"
  np.testing.assert_array_equal(together[0], one_by_one[0])
  np.testing.assert_array_equal(together[2], one_by_one[1])


class _Graph:
  """A stand-in graph definition that counts how often it is hashed."""

  def __init__(self):
    self.hashes = 0

  def __hash__(self):
    self.hashes += 1
    return 7

  def __eq__(self, other):
    return other is self


def test_bridge_hashes_its_graph_once():
  graph = _Graph()
  fn = EvalApply(graph)
  assert hash(fn) == hash(fn) == 7
  assert graph.hashes == 1
  assert fn == EvalApply(graph)
  # The cached hash is not pickled (string hashes differ between processes).
  assert "_hash" not in pickle.loads(pickle.dumps(fn)).__dict__


def test_one_device_takes_a_models_parameters_as_they_are(mlp, monkeypatch):
  apply_fn, params, x = mlp
  assert not any(leaf.committed for leaf in jax.tree.leaves(params))
  everywhere = _certify(mlp, 5)
  placed = []
  real_replicate = transfer.replicate

  def replicate(mesh, tree):
    placed.append(len(jax.tree.leaves(tree)))
    return real_replicate(mesh, tree)

  monkeypatch.setattr(transfer, "replicate", replicate)
  one = rsjax.certify(
    5,
    apply_fn,
    params,
    x,
    sigma=0.25,
    num_classes=10,
    n0=100,
    n=1000,
    batch_size="auto",
    devices=1,
  )
  assert placed == [3]  # (x, sigma, ids) only
  np.testing.assert_array_equal(one.counts, everywhere.counts)
  np.testing.assert_array_equal(one.counts_selection, everywhere.counts_selection)
  np.testing.assert_array_equal(one.radius, everywhere.radius)


def test_per_call_benchmark_runs():
  per_call = pytest.importorskip("benchmarks.calls")
  row = per_call.call_row(
    "mlp", n0=16, num=16, batch_size=16, reps=2, profile_calls=1, log=lambda *_: None
  )
  assert row["wall_s_best"] > 0 and row["cpu_s_best"] >= 0 and row["programs_s_best"] > 0
  assert (row["warm_call_compiles"], row["warm_call_traces"]) == (0, 0)
  assert row["warm_call_device_gets"] == 1
  assert set(row["phases_s_profiled"]) == set(per_call.PHASES)
