"""`rsjax verify` of DDRS runs: Cohen's radius at each row's sigma, then the memory replayed.

The replay of the memory (``rsjax.ddrs._check.replay_memory``, NumPy) is checked
against the memory that certified (``rsjax.ddrs.MemoryCertifier``) on inputs
whose balls meet often; a DDRS run through the command verifies, and each edit
(a final radius, a Monte-Carlo radius, a count, a sigma, the inputs) is caught.
"""

import numpy as np
import pytest
from run_edits import copy_run, edit_column, edit_record, move_one_count

from rsjax import ddrs, verify
from rsjax.app import audit, cli
from rsjax.ddrs import _check as _ddrs
from rsjax.records import io

COMMON = ["--N", "300", "--N0", "30", "--batch", "300", "--skip", "60", "--quiet"]


def run_cli(*argv):
  return cli.main([str(a) for a in argv])


@pytest.mark.parametrize("dim, block", [(2, 7), (5, 512)])
def test_replay_memory_equals_the_memory_certifier(monkeypatch, dim, block):
  rng = np.random.default_rng(dim)
  b = 300
  x = rng.uniform(0, 1, (b, dim)).astype(np.float32)
  cls = rng.integers(-1, 3, b)
  rad = rng.uniform(0, 0.3, b)
  monkeypatch.setattr(_ddrs, "_BLOCK", block)
  got_c, got_r = _ddrs.replay_memory(x.astype(np.float64), cls, rad)
  mem = ddrs.MemoryCertifier()
  want = [mem.update(x[i], cls[i], rad[i]) for i in range(b)]
  np.testing.assert_array_equal(got_c, [c for c, _ in want])
  np.testing.assert_array_equal(got_r, [r for _, r in want])  # bit for bit
  changed = (got_c != cls) | (got_r != rad)
  assert changed.sum() > 20 and (got_c != cls).sum() > 5  # the memory really acts here


@pytest.fixture(scope="module")
def ddrs_run(trained, tmp_path_factory):
  out = tmp_path_factory.mktemp("ddrs") / "ddrs.tsv"
  assert (
    run_cli(
      "certify", trained, out, "--method", "ddrs", "--ddrs-steps", "2", "--ddrs-lr", "0.01", *COMMON
    )
    == 0
  )
  return trained, out


def caught(f, idx, needle, **kwargs):
  rep = verify.verify(f, **kwargs)
  assert not rep.ok, "the edit went unnoticed"
  assert {m.idx for m in rep.mismatches} == {idx}, rep.mismatches
  assert needle in rep.mismatches[0].reason, rep.mismatches[0].reason


def test_an_honest_ddrs_run_verifies_and_edits_are_caught(ddrs_run, tmp_path):
  _, src = ddrs_run
  rep = verify.verify(src)
  assert rep.ok and rep.rows == 5, rep.mismatches
  res = io.read_certify(src)
  j = int(np.flatnonzero(res.radius > 0)[0])
  idx = int(res.idx[j])
  for column in ("radius", "radius_mc"):
    f = copy_run(src, tmp_path / f"{column}.tsv")
    edit_column(f, j, column, lambda v: repr(float(v) * 0.9))
    caught(f, idx, column)
  f = copy_run(src, tmp_path / "sigma.tsv")
  edit_column(f, j, "sigma", lambda v: repr(float(v) * 1.01))
  caught(f, idx, "sigma")
  f = copy_run(src, tmp_path / "count.tsv")
  edit_record(f, idx, move_one_count)
  caught(f, idx, "p_lower")


def test_ddrs_inputs_are_checked_against_their_fingerprints(ddrs_run):
  _, src = ddrs_run
  from rsjax import data

  ds = data.load("digits", "test")

  def other(idx):  # the next digit of each row
    return ds.get_batch(np.asarray(idx) + 1)[0]

  rep = verify.verify(src, inputs=other)
  assert not rep.ok and all("fingerprint" in m.reason for m in rep.mismatches)
  assert len(rep.mismatches) == rep.rows
  assert verify.verify(src, inputs=lambda idx: ds.get_batch(idx)[0]).ok


def test_ddrs_without_the_memory_is_never_verified(ddrs_run, tmp_path):
  model, _ = ddrs_run
  out = tmp_path / "nomem.tsv"
  assert (
    run_cli(
      "certify",
      model,
      out,
      "--method",
      "ddrs",
      "--ddrs-steps",
      "2",
      "--ddrs-lr",
      "0.01",
      "--ddrs-memory",
      "off",
      *COMMON,
    )
    == 0
  )
  rep = verify.verify(out)
  assert not rep.ok
  assert len(rep.mismatches) == rep.rows == 5
  assert all("no certificate" in m.reason for m in rep.mismatches)


def test_an_honest_ddrs_run_passes_its_audit(ddrs_run):
  model, src = ddrs_run
  report = audit.audit(src, model_dir=model, rows=3)
  assert report.ok, report.reason
