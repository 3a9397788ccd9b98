"""``rsjax recertify --replay``: the parent's stored votes, the child on the parent's own
samples, the switch on the selection share, verify, audit, forgeries, and the level of the
procedure by Monte Carlo on exact binomial draws."""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest

from rsjax import Sampling, models, sample_counts, stats, verify
from rsjax.app import audit, cli
from rsjax.cohen._recertify_check import file_sha256, replay_switched, votes_path
from rsjax.cohen._recertify_replay import (
  ParentVotes,
  sample_votes,
  write_votes,
)
from rsjax.engine.counts import prepare_inputs
from rsjax.records.spec import RunSpec

N, N0, N_CHILD = 400, 40, 200


def run_cli(*argv):
  return cli.main([str(a) for a in argv])


def _linear(params, x):
  return x.reshape(x.shape[0], -1) @ params


def test_the_votes_add_up_to_the_engines_counts():
  """Sample ``j`` of the votes is the engine's sample ``j``: the bits of each input add up
  to ``sample_counts``' count of the class they test, for any ``num``."""
  rng = np.random.default_rng(0)
  w = rng.normal(size=(6, 3)).astype(np.float32)
  x = rng.normal(size=(5, 6)).astype(np.float32)
  ids = np.array([3, 9, 11, 40, 41])
  key = jax.random.key(7)
  settings = Sampling(n=300, batch_size=64)
  xp, sig, ids_arr = prepare_inputs(x, 0.8, ids)
  classes = np.array([0, 1, 2, 0, 1])
  votes = sample_votes(key, _linear, w, xp, sig, ids_arr, classes, num=300, num_classes=3,
                       settings=settings)  # fmt: skip
  counts = sample_counts(key, _linear, w, x, sigma=0.8, num_classes=3, num=300, ids=ids)
  assert votes.shape == (5, 300) and votes.dtype == bool
  np.testing.assert_array_equal(votes.sum(axis=1), counts[np.arange(5), classes])
  first = sample_counts(key, _linear, w, x, sigma=0.8, num_classes=3, num=120, ids=ids)
  np.testing.assert_array_equal(votes[:, :120].sum(axis=1), first[np.arange(5), classes])


def test_the_votes_file_round_trips(tmp_path):
  bits = np.random.default_rng(1).random((3, 21)) < 0.5
  path = str(tmp_path / "p.tsv.votes.npz")
  digest = write_votes(path, [5, 2, 9], [1, 0, 3], bits)
  assert digest == file_sha256(path)
  votes = ParentVotes.read(path, jax.random.key(0))
  classes, got = votes.rows(np.array([9, 5]), 21)
  np.testing.assert_array_equal(classes, [3, 1])
  np.testing.assert_array_equal(got, bits[[2, 0]])
  np.testing.assert_array_equal(votes.rows(np.array([2]), 10)[1], bits[[1], :10])
  with pytest.raises(ValueError, match="at most the parent's 21"):
    votes.rows(np.array([2]), 22)
  with pytest.raises(ValueError, match="no row of input 4"):
    votes.rows(np.array([4]), 5)


def test_the_switch_reads_the_selection_share():
  np.testing.assert_array_equal(
    replay_switched(np.array([1.0, 0.99, 99 / 100, 0.98, 0.0]), 0.99),
    [True, True, True, False, False],
  )


def test_the_replayed_procedure_holds_its_level_by_monte_carlo():
  """The whole procedure on exact draws: selection (n0) decides ``c_A`` and the switch; a
  switched row is certified from scratch on fresh draws at ``alpha_1 + alpha_2``; a bound row
  takes the parent's bound of its N estimation samples minus the disagreement bound of the
  first n of the *same* samples. Its claim ``P(child = c_A) >= p`` fails at most ``alpha_1 +
  alpha_2`` of the time, for parents and children near the edge of the claims."""
  rng = np.random.default_rng(0)
  a1 = a2 = 0.02
  n0, big_n, n, trials, gamma = 20, 400, 100, 20_000, 0.9
  # (P(parent = A, child = A), P(parent = A, child != A), P(parent != A, child = A))
  for joint in ((0.80, 0.06, 0.04), (0.90, 0.04, 0.0), (0.93, 0.02, 0.0), (0.70, 0.10, 0.10)):
    p_aa, p_ab, p_ba = joint
    p_child = p_aa + p_ba
    p_parent = p_aa + p_ab
    sel = rng.binomial(n0, p_parent, trials)  # the parent's selection votes for A
    picked = sel >= n0 - sel  # A selected (else the claim is about another class: skipped)
    switched = replay_switched(sel / n0, gamma)
    # estimation samples: categories AA, AB, BA, BB; the first n are the replayed ones
    probs = [p_aa, p_ab, p_ba, 1 - p_aa - p_ab - p_ba]
    first = rng.multinomial(n, probs, trials)
    rest = rng.multinomial(big_n - n, probs, trials)
    parent_a = first[:, 0] + first[:, 1] + rest[:, 0] + rest[:, 1]
    p_lower = stats.clopper_pearson_lower(parent_a, big_n, a1)
    zeta = stats.clopper_pearson_upper(first[:, 1], n, a2)
    bound_claim = p_lower - zeta
    scratch = stats.clopper_pearson_lower(rng.binomial(n, p_child, trials), n, a1 + a2)
    claim = np.where(switched, scratch, bound_claim)
    wrong = picked & (claim > 0.5) & (claim > p_child)
    assert wrong.mean() <= a1 + a2, (joint, wrong.mean())


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
  """A parent run (40 digits, sigma 0.5), its pruned child replayed and its int8 child."""
  root = tmp_path_factory.mktemp("replay")
  parent_dir = root / "mlp"
  assert run_cli("train", "--dataset", "digits", "--model", "mlp", "--sigma", "0.5", "--epochs",
                 "2", "--batch", "64", "--lr", "0.1", "--out", parent_dir, "--quiet") == 0  # fmt: skip
  parent = root / "parent.tsv"
  assert run_cli("certify", parent_dir, parent, "--N", N, "--N0", N0, "--batch", "400",
                 "--quiet", "--skip", "7", "--max", "280") == 0  # fmt: skip
  model, config = models.load_model(parent_dir)
  child_dir = root / "pruned"
  models.save_child(child_dir, models.prune_magnitude(model, 0.6), config, {"transform": "prune"})
  child = root / "child.tsv"
  assert run_cli("recertify", parent, child_dir, child, "--N", N_CHILD, "--quiet", "--replay",
                 "--gamma", "0.95") == 0  # fmt: skip
  return {"parent_dir": parent_dir, "parent": parent, "child_dir": child_dir, "child": child}


def _copy_family(fam, root):
  """The parent (with its votes) and the child copied into ``root``."""
  for src in (fam["parent"], fam["child"]):
    for suffix in ("", ".run.json", ".cert.jsonl", ".votes.npz"):
      if (f := str(src) + suffix) and shutil.os.path.exists(f):
        shutil.copy(f, str(root / src.name) + suffix)
  return root / fam["parent"].name, root / fam["child"].name


def test_a_replayed_child_verifies_and_passes_the_audit(replayed):
  child = RunSpec.read(replayed["child"])
  assert child.options["replay"] == file_sha256(votes_path(replayed["parent"]))
  report = verify.verify(replayed["child"])
  assert report.ok, report.summary()
  rows = [json.loads(line) for line in open(str(replayed["child"]) + ".cert.jsonl")]
  parent = {json.loads(line)["idx"]: json.loads(line) for line in open(str(replayed["parent"])
                                                                         + ".cert.jsonl")}  # fmt: skip
  switched = [r for r in rows if r.get("switched") is not None]
  bound = [r for r in rows if r.get("switched") is None]
  assert switched and bound  # both kinds of row in the fixture
  for r in switched:  # the switch read the parent's selection share
    c0 = parent[r["idx"]]["counts0"]
    assert max(c0.values()) / N0 >= 0.95
  for r in bound:
    c0 = parent[r["idx"]]["counts0"]
    assert max(c0.values()) / N0 < 0.95 and sum(r["counts"].values()) == N_CHILD
  a = audit.audit(replayed["child"], model_dir=replayed["child_dir"], rows="all", seed=1,
                  parent_model_dir=replayed["parent_dir"])  # fmt: skip
  assert a.ok, a.reason
  assert "stored votes" in str(a.checks[-1])


def test_the_votes_are_the_parent_models(replayed):
  """The stored votes add up to the parent's recorded counts of ``c_A``, row by row."""
  votes = np.load(votes_path(replayed["parent"]))
  recs = {json.loads(line)["idx"]: json.loads(line) for line in open(str(replayed["parent"])
                                                                      + ".cert.jsonl")}  # fmt: skip
  bits = np.unpackbits(votes["bits"], axis=1, count=N, bitorder="little")
  for i, k, b in zip(votes["ids"], votes["classes"], bits, strict=True):
    assert int(b.sum()) == recs[int(i)]["counts"].get(str(k), 0)


def test_edited_votes_fail_verify(replayed, tmp_path):
  _, child = _copy_family(replayed, tmp_path)
  path = votes_path(tmp_path / "parent.tsv")
  z = dict(np.load(path))
  z["bits"] = z["bits"].copy()
  z["bits"][0, 0] ^= 1
  np.savez(path, **z)
  report = verify.verify(child)
  assert not report.ok and "not the ones the child was certified from" in report.summary()


def test_permuted_votes_under_a_forged_digest_fail_verify_or_audit(replayed, tmp_path):
  """Votes whose bits were moved (each row's sum kept) and a child record naming the new
  file: verify checks the sums only, the audit draws the votes again."""
  parent, child = _copy_family(replayed, tmp_path)
  path = votes_path(parent)
  z = dict(np.load(path))
  z["bits"] = np.roll(z["bits"], 1, axis=1)
  digest = write_votes(path, z["ids"], z["classes"],
                       np.unpackbits(z["bits"], axis=1, count=N, bitorder="little").astype(bool))  # fmt: skip
  run = json.load(open(str(child) + ".run.json"))
  run["method"]["options"]["replay"] = digest
  json.dump(run, open(str(child) + ".run.json", "w"))
  a = audit.audit(child, model_dir=replayed["child_dir"], rows="all", seed=1,
                  parent_model_dir=replayed["parent_dir"])  # fmt: skip
  assert not a.ok


def test_more_disagreements_than_parent_votes_fail_verify(replayed, tmp_path):
  _, child = _copy_family(replayed, tmp_path)
  rec = str(child) + ".cert.jsonl"
  rows = [json.loads(line) for line in open(rec)]
  votes = np.load(votes_path(tmp_path / "parent.tsv"))
  for r in rows:
    if r.get("switched") is None:
      at = int(np.flatnonzero(votes["ids"] == r["idx"])[0])
      top = int(np.unpackbits(votes["bits"][at], count=N, bitorder="little")[:N_CHILD].sum())
      r["counts"] = {"0": N_CHILD - top - 1, "1": top + 1}
      break
  with open(rec, "w") as f:
    f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in rows)
  report = verify.verify(child)
  assert not report.ok and "where the parent voted c_A" in report.summary()


def test_a_missing_votes_file_is_refused(replayed, tmp_path):
  _, child = _copy_family(replayed, tmp_path)
  (tmp_path / "parent.tsv.votes.npz").unlink()
  report = verify.verify(child)
  assert not report.ok and "cannot be read" in report.summary()
