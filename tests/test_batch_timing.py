"""The batch chosen by time (``rsjax.engine.batch_timing``): the probe's arithmetic with a
fake clock, the choice rules, the caches (process and file), and counts that do not depend
on it. No timing is asserted: which batch is fastest is the machine's."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rsjax
from rsjax.engine import batch_timing as bt
from rsjax.engine import batching


def _mlp(params, x):
  w1, w2 = params
  return jnp.tanh(x.reshape(x.shape[0], -1) @ w1) @ w2


def _params(d=16, h=8, c=3):
  rng = np.random.RandomState(0)
  return (jnp.asarray(rng.randn(d, h), jnp.float32), jnp.asarray(rng.randn(h, c), jnp.float32))


@pytest.fixture(autouse=True)
def fresh_memo(monkeypatch):
  monkeypatch.setattr(bt, "_MEMO", {})


def test_time_batches_alternates_the_candidates_and_reports_min_median_max():
  order, ticks = [], iter(range(1000))
  seconds = {8: [1.0, 2.0, 4.0], 16: [1.0, 1.0, 1.0]}

  def run(b):
    def call():
      order.append(b)

    return call

  clock_values = []
  for r in range(3):
    for b in (8, 16):
      start = float(next(ticks)) * 10
      clock_values += [start, start + seconds[b][r]]
  clock = iter(clock_values).__next__
  rates = bt.time_batches(run, [8, 16], lambda b: b * 100, rounds=3, clock=clock)
  assert order == [8, 16, 8, 16, 8, 16, 8, 16]  # one warm-up each, then alternated rounds
  (b8, lo8, med8, hi8), (b16, lo16, med16, hi16) = rates
  assert (b8, b16) == (8, 16)
  assert (lo8, med8, hi8) == pytest.approx((200.0, 400.0, 800.0))
  assert (lo16, med16, hi16) == pytest.approx((1600.0, 1600.0, 1600.0))


def test_best_takes_the_largest_batch_within_two_percent_of_the_best_median():
  assert bt._best([(64, 0, 100.0, 0), (128, 0, 99.0, 0), (256, 0, 90.0, 0)]) == 128
  assert bt._best([(64, 0, 100.0, 0), (128, 0, 97.0, 0)]) == 64


def test_a_given_batch_is_used_as_given():
  choice = bt.choose_batch_size(_mlp, _params(), (4, 4), num=10, batch_size=96)
  assert (choice.batch, choice.how) == (96, "given")
  with pytest.raises(ValueError, match="batch_size"):
    bt.choose_batch_size(_mlp, _params(), (4, 4), num=10, batch_size="fast")


def test_a_small_call_keeps_the_old_default_and_auto_is_the_memory_fit():
  small = bt.choose_batch_size(_mlp, _params(), (4, 4), num=5000, inputs=2)
  assert (small.batch, small.how) == (batching.even_steps(1000, 5000), "default")
  memory = bt.choose_batch_size(_mlp, _params(), (4, 4), num=5000, batch_size="auto")
  assert memory.how == "memory"
  assert memory.batch == batching.auto_batch_size(_mlp, _params(), (4, 4), num=5000)


def _quick_probe(monkeypatch):
  monkeypatch.setattr(bt, "CANDIDATES", (8, 16))
  monkeypatch.setattr(bt, "ROUND_S", 0.001)
  monkeypatch.setattr(bt, "ROUNDS", 1)
  monkeypatch.setattr(batching, "_cpu_cap", lambda size: 32)  # the memory fit: 32


def test_timed_probe_then_the_process_cache(monkeypatch):
  _quick_probe(monkeypatch)
  choice = bt.choose_batch_size(_mlp, _params(), (4, 4), num=10_000, batch_size="timed")
  assert choice.how == "timed"
  assert [r[0] for r in choice.rates] == [8, 16, 32]
  assert all(lo <= med <= hi for _, lo, med, hi in choice.rates)
  assert choice.batch == batching.even_steps(bt._best(choice.rates), 10_000)
  assert choice.describe().startswith(f"{choice.batch} (timed probe, samples/s")

  def no_probe(*a, **k):
    raise AssertionError("probed again")

  monkeypatch.setattr(bt, "_probe", no_probe)
  again = bt.choose_batch_size(_mlp, _params(), (4, 4), num=10_000)  # not told: known
  assert (again.how, again.rates) == ("cached", choice.rates)


def test_a_large_call_on_a_cpu_is_timed_where_it_pays(monkeypatch):
  _quick_probe(monkeypatch)
  monkeypatch.setattr(bt, "PAYS", 20_000)
  assert bt.choose_batch_size(_mlp, _params(), (4, 4), num=10_000).how == "default"
  big = bt.choose_batch_size(_mlp, _params(), (4, 4), num=10_000, inputs=2)
  assert big.how == ("timed" if jax.devices()[0].platform == "cpu" else "memory")


def test_the_probe_is_kept_beside_the_compilation_cache(monkeypatch, tmp_path):
  _quick_probe(monkeypatch)
  monkeypatch.setattr(bt, "_cache_path", lambda: str(tmp_path / bt.CACHE_FILE))
  first = bt.choose_batch_size(_mlp, _params(), (4, 4), num=10_000, batch_size="timed")
  path = tmp_path / bt.CACHE_FILE
  table = json.loads(path.read_text())
  assert len(table) == 1 and next(iter(table.values()))["batch"] == bt._best(first.rates)
  monkeypatch.setattr(bt, "_MEMO", {})  # a new process: only the file remains
  monkeypatch.setattr(bt, "_probe", lambda *a, **k: pytest.fail("probed again"))
  second = bt.choose_batch_size(_mlp, _params(), (4, 4), num=10_000, batch_size="timed")
  assert second.how == "cached" and second.batch == first.batch
  other = bt.choose_batch_size(_mlp, _params(h=4), (4, 4), num=10, batch_size=7)
  assert other.how == "given"  # another model would have another key
  assert bt._disk_key(_mlp, _params(h=4), (4, 4), None, jax.devices()[0], [8]) not in table
  assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_counts_do_not_depend_on_the_chosen_batch(getkey, monkeypatch):
  _quick_probe(monkeypatch)
  params = _params(16, h=8, c=3)
  x = np.random.RandomState(1).rand(3, 4, 4).astype(np.float32)
  key = getkey()
  kw = dict(sigma=0.7, num_classes=3, num=700)
  timed = rsjax.sample_counts(key, _mlp, params, x, batch_size="timed", **kw)
  fixed = rsjax.sample_counts(key, _mlp, params, x, batch_size=96, **kw)
  told = rsjax.sample_counts(key, _mlp, params, x, **kw)
  np.testing.assert_array_equal(np.asarray(timed), np.asarray(fixed))
  np.testing.assert_array_equal(np.asarray(told), np.asarray(fixed))


def _certify_run(trained, out, *extra):
  from rsjax.app import cli

  argv = ["certify", trained, out, "--N", "2000", "--max", "6", "--quiet", *extra]
  assert cli.main([str(a) for a in argv]) == 0
  return json.loads(open(f"{out}.run.json").read())


@pytest.mark.heavy
def test_a_run_records_its_batch_and_verifies(trained, tmp_path, monkeypatch, capsys):
  from rsjax import verify

  given = _certify_run(trained, tmp_path / "given.tsv", "--batch", "500")
  assert given["versions"]["batch"] == "500 (given)"
  short = _certify_run(trained, tmp_path / "short.tsv")
  assert short["versions"]["batch"].startswith("1000 (not told; too short")
  _quick_probe(monkeypatch)
  monkeypatch.setattr(bt, "PAYS", 1000)  # six rows of 2,000 samples now pay
  timed = _certify_run(trained, tmp_path / "timed.tsv")
  how = "timed probe" if jax.devices()[0].platform == "cpu" else "the largest that fits"
  assert how in timed["versions"]["batch"]
  assert "batch: " in capsys.readouterr().out
  for name in ("given", "short", "timed"):
    assert verify.verify(str(tmp_path / f"{name}.tsv")).ok
  rows = [open(tmp_path / f"{n}.tsv").read().splitlines()[1:] for n in ("given", "short", "timed")]
  strip = [[r.rsplit("\t", 1)[0] for r in part] for part in rows]  # the time column aside
  assert strip[0] == strip[1] == strip[2]  # the batch changes speed only
