"""Resumable dataset runs: rows written as they are done, resumed without loss."""

import types

import numpy as np
import pytest

import rsjax
from rsjax.records import io
from rsjax.runs import runner
from rsjax.runs.method import Certifier


def axis_apply(params, x):
  import jax.numpy as jnp

  z = x.reshape(x.shape[0], -1)[:, 0] * params
  return jnp.stack([-z, z], axis=-1)


@pytest.fixture
def problem():
  rng = np.random.default_rng(0)
  x = rng.uniform(-1, 1, size=(23, 3)).astype(np.float32)
  y = (x[:, 0] > 0).astype(int)
  return x, y


def make_fn(calls=None, fail_after=None):
  import jax.numpy as jnp

  def fn(x, ids):
    if calls is not None:
      calls.append(list(ids))
      if fail_after is not None and len(calls) > fail_after:
        raise KeyboardInterrupt("simulated interruption")
    return rsjax.certify(
      3,
      axis_apply,
      jnp.float32(1.0),
      x,
      sigma=0.5,
      num_classes=2,
      n0=20,
      n=200,
      alpha=0.01,
      batch_size=100,
      ids=ids,
    )

  return fn


class Fn(Certifier):
  """A run's certifier of any ``fn(x, ids) -> Certificate`` (the runner gives the chunk)."""

  def __init__(self, fn):
    self.fn = fn

  def certify(self, batch):
    return self.fn(batch.x, batch.ids)


#: What the runner reads of the run's context for ``Fn`` (``fn`` holds the rest).
CTX = types.SimpleNamespace(key=None, apply_fn=None, params=None, sigma=None, settings=None,
                            dataset=types.SimpleNamespace(num_classes=2))  # fmt: skip


def rows(path):
  r = io.read_certify(path)
  return list(
    zip(r.idx.tolist(), r.label.tolist(), r.predict.tolist(), r.radius.tolist(), strict=True)
  )


def test_declared_indices_is_the_one_rule_of_which_rows():
  from rsjax.records.spec import declared_indices

  assert list(declared_indices(10, skip=3)) == [0, 3, 6, 9]
  assert list(declared_indices(10, skip=2, count=2)) == [0, 2]
  assert list(declared_indices(10, start=8)) == [8, 9]
  assert list(declared_indices(10, start=1, stop=8, skip=3)) == [1, 4, 7]
  assert len(declared_indices(10**12, skip=7)) == -(-(10**12) // 7)  # a range: nothing built
  with pytest.raises(ValueError, match="skip"):
    declared_indices(10, skip=0)
  with pytest.raises(ValueError, match="start"):
    declared_indices(10, start=-1)


def test_fingerprint_counts_a_typed_key_by_its_data():
  """A DEQ trained with the Jacobian regularizer holds a typed PRNG key among its variables;
  the model's fingerprint hashes its key data (NumPy cannot convert the key itself)."""
  import jax

  params = {"w": np.ones(3, np.float32), "key": jax.random.key(0)}
  same = {"w": np.ones(3, np.float32), "key": jax.random.key(0)}
  other = {"w": np.ones(3, np.float32), "key": jax.random.key(1)}
  assert runner.fingerprint(params) == runner.fingerprint(same) != runner.fingerprint(other)


def test_interrupted_run_resumes_without_duplicates(tmp_path, problem):
  x, y = problem

  def get_batch(idx):
    return x[idx], y[idx]

  idx = np.arange(0, len(x), 2)
  full = tmp_path / "full.tsv"
  runner.certify_dataset(
    CTX, Fn(make_fn()), get_batch, idx, full, inputs_per_call=3, progress=False
  )
  part = tmp_path / "part.tsv"
  calls = []
  with pytest.raises(KeyboardInterrupt):
    runner.certify_dataset(
      CTX, Fn(make_fn(calls, fail_after=2)), get_batch, idx, part, inputs_per_call=3, progress=False
    )
  assert len(rows(part)) == 6  # two calls of 3 rows made it to disk
  # Simulate a kill in the middle of writing a row.
  with open(part, "a") as f:
    f.write("99\t1\t1\t0.3")
  calls2 = []
  wrote = runner.certify_dataset(
    CTX, Fn(make_fn(calls2)), get_batch, idx, part, inputs_per_call=3, progress=False
  )
  assert wrote == len(idx) - 6
  assert sorted(sum(calls2, [])) == sorted(set(idx.tolist()) - set(sum(calls[:2], [])))
  assert rows(part) == rows(full)  # same rows, in the same order, no duplicate


def test_rows_are_on_disk_before_the_run_ends(tmp_path, problem):
  x, y = problem
  path = tmp_path / "r.tsv"
  seen = []

  def fn(x_, ids):
    seen.append(len(io.read_certify(path).idx) if path.exists() else 0)
    return make_fn()(x_, ids)

  runner.certify_dataset(
    CTX, Fn(fn), lambda i: (x[i], y[i]), np.arange(6), path, inputs_per_call=2, progress=False
  )
  assert seen == [0, 2, 4]


def test_predict_dataset(tmp_path, problem):
  import jax.numpy as jnp

  x, y = problem

  def fn(x_, ids):
    return rsjax.predict(
      1, axis_apply, jnp.float32(1.0), x_, sigma=0.1, num_classes=2, n=200, alpha=0.01, ids=ids
    )

  path = tmp_path / "p.tsv"
  runner.predict_dataset(
    fn, lambda i: (x[i], y[i]), np.arange(len(x)), path, inputs_per_call=5, progress=False
  )
  r = io.read_predict(path)
  assert len(r.idx) == len(x)
  ok = r.predict != -1
  assert np.mean(r.correct[ok]) > 0.9
