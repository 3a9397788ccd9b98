"""``rsjax train`` / ``certify --method patch`` and ``--method ablation``: honest runs verify
and audit; edited votes, a changed band width, a changed patch size (radius), a changed
encoding and a changed ``keep`` are caught by verify or audit."""

from __future__ import annotations

import json

import numpy as np
import pytest
from run_edits import copy_run, edit_column, edit_record, edit_run

from rsjax import claims, verify
from rsjax.app import audit, cli

COMMON = ["--dataset", "digits", "--skip", "30", "--sigma", "1", "--quiet"]


def _train(base, name, *flags):
  out = base / name
  argv = ["train", "--model", "mlp", "--dataset", "digits", "--epochs", "1", "--out", out,
          "--quiet", *flags]  # fmt: skip
  assert cli.main([str(a) for a in argv]) == 0
  return out


@pytest.fixture(scope="module")
def patch_run(tmp_path_factory):
  base = tmp_path_factory.mktemp("patch")
  model = _train(base, "m", "--method", "patch", "--ablation-size", "3")
  assert json.loads((model / "config.json").read_text())["input_shape"] == [8, 8, 2]
  out = base / "p.tsv"
  argv = ["certify", model, out, "--method", "patch", "--ablation-size", "3", *COMMON]
  assert cli.main([str(a) for a in argv]) == 0
  return model, out


@pytest.fixture(scope="module")
def l0_run(tmp_path_factory):
  base = tmp_path_factory.mktemp("l0")
  model = _train(base, "m", "--method", "ablation", "--keep", "20")
  out = base / "l.tsv"
  argv = ["certify", model, out, "--method", "ablation", "--keep", "20", "--N", "200",
          "--N0", "20", *COMMON]  # fmt: skip
  assert cli.main([str(a) for a in argv]) == 0
  return model, out


def _records(path):
  return [json.loads(line) for line in (path.parent / (path.name + ".cert.jsonl")).open()]


def _caught(model, path):
  return not verify.verify(path).ok or not audit.audit(path, model_dir=model, rows="all").ok


def test_honest_patch_run_verifies_and_audits(patch_run):
  model, out = patch_run
  rep = verify.verify(out)
  assert rep.ok, rep.summary()
  assert "column ablation of size 3, every position (exact votes, no noise drawn)" in rep.claim
  recs = _records(out)
  assert all(r["n"] == 8 and sum(r["counts"].values()) == 8 for r in recs)
  assert all(r["counts0"] is None for r in recs)
  assert audit.audit(out, model_dir=model, rows="all").ok


def test_edited_votes_are_caught(patch_run, tmp_path):
  model, out = patch_run
  f = copy_run(out, tmp_path / "f.tsv")
  r0 = _records(out)[0]

  def move(r):
    top = max(r["counts"], key=r["counts"].get)
    other = next(str(c) for c in range(10) if str(c) != top)
    r["counts"][top] -= 1
    r["counts"][other] = r["counts"].get(other, 0) + 1
    return r

  edit_record(f, r0["idx"], move)
  assert not verify.verify(f).ok


def _reradius_patch(path, size):
  """A forger's rewrite of every row's predict, radius and share for band width ``size``."""
  lines = path.read_text().split("\n")
  recs = {r["idx"]: r for r in _records(path)}
  head = lines[0].split("\t")
  for j, line in enumerate(lines[1:], start=1):
    if not line:
      continue
    f = line.split("\t")
    r = recs[int(f[0])]
    counts = np.zeros((1, 10), np.int64)
    for c, v in r["counts"].items():
      counts[0, int(c)] = v
    p, rad = claims.patch_certificate(counts, "column", size, 8, 8)
    f[head.index("predict")], f[head.index("radius")] = str(int(p[0])), repr(float(rad[0]))
    f[head.index("correct")] = str(int(int(p[0]) == int(f[head.index("label")])))
    lines[j] = "\t".join(f)
  path.write_text("\n".join(lines))


def test_changed_band_width_is_caught(patch_run, tmp_path):
  model, out = patch_run
  f = copy_run(out, tmp_path / "w.tsv")

  def narrower(run):
    run["method"]["options"]["ablation_size"] = 1
    run["method"]["details"]["size"] = 1

  edit_run(f, narrower)
  assert not verify.verify(f).ok  # the radii are those of width 3
  _reradius_patch(f, 1)  # the forger's radii of width 1: the votes are width 3's
  assert verify.verify(f).ok
  assert not audit.audit(f, model_dir=model, rows="all").ok


def test_changed_patch_size_is_caught(patch_run, tmp_path):
  _, out = patch_run
  f = copy_run(out, tmp_path / "s.tsv")
  edit_column(f, 0, "radius", lambda v: repr(float(v) + 1))
  assert not verify.verify(f).ok


def test_changed_encoding_is_caught(patch_run, tmp_path):
  model, out = patch_run
  f = copy_run(out, tmp_path / "e.tsv")
  edit_run(f, lambda run: run["method"]["details"].update(encoding="zeros, C channels"))
  rep = verify.verify(f)
  assert not rep.ok and "details" in rep.summary() + "".join(map(str, rep.mismatches))
  assert _caught(model, f)


def test_honest_l0_run_verifies_and_audits(l0_run):
  model, out = l0_run
  assert verify.verify(out).ok
  recs = _records(out)
  assert all(sum(r["counts"].values()) == 200 and sum(r["counts0"].values()) == 20 for r in recs)
  assert audit.audit(out, model_dir=model, rows="all", batch_size=77).ok


def test_edited_l0_counts_and_keep_are_caught(l0_run, tmp_path):
  model, out = l0_run
  f = copy_run(out, tmp_path / "c.tsv")
  r0 = _records(out)[0]

  def move(r):  # from the selected class: its bound moves
    top = max(r["counts0"], key=r["counts0"].get)
    other = next(str(c) for c in range(10) if str(c) != top)
    gone = min(5, r["counts"].get(top, 0))
    r["counts"][top] = r["counts"].get(top, 0) - gone
    r["counts"][other] = r["counts"].get(other, 0) + gone
    return r

  assert r0["counts"].get(max(r0["counts0"], key=r0["counts0"].get), 0) > 0
  edit_record(f, r0["idx"], move)
  assert not verify.verify(f).ok
  g = copy_run(out, tmp_path / "k.tsv")

  def more(run):
    run["method"]["options"]["keep"] = 10
    run["method"]["details"]["keep"] = 10

  edit_run(g, more)
  assert _caught(model, g)


def test_a_model_of_plain_images_is_refused_in_one_line(tmp_path, capsys):
  from rsjax import models

  m = models.create_model("mlp", num_classes=10, input_shape=(8, 8, 1), rngs=0)
  config = {"model": "mlp", "num_classes": 10, "input_shape": [8, 8, 1], "sigma": 0.25}
  models.save_model(tmp_path / "m", m, config)
  argv = ["certify", tmp_path / "m", tmp_path / "x.tsv", "--method", "patch", *COMMON]
  assert cli.main([str(a) for a in argv]) != 0
  assert "does not take the encoded images [8, 8, 2]" in capsys.readouterr().err


def test_an_ablation_model_without_sigma_is_told_it_is_not_used(patch_run, tmp_path, capsys):
  model, _ = patch_run
  argv = ["certify", model, tmp_path / "x.tsv", "--method", "patch", "--quiet"]
  assert cli.main([str(a) for a in argv]) != 0
  assert "records and does not use" in capsys.readouterr().err


def test_a_vote_threshold_run_verifies_and_a_changed_threshold_is_caught(patch_run, tmp_path):
  model, _ = patch_run
  out = tmp_path / "t.tsv"
  argv = ["certify", model, out, "--method", "patch", "--ablation-size", "3",
          "--vote-threshold", "0.1", *COMMON]  # fmt: skip
  assert cli.main([str(a) for a in argv]) == 0
  assert sum(sum(r["counts"].values()) for r in _records(out)) > 8 * 10  # several vote
  assert verify.verify(out).ok
  assert audit.audit(out, model_dir=model, rows="all").ok
  f = copy_run(out, tmp_path / "t2.tsv")

  def other(run):
    run["method"]["options"]["vote_threshold"] = 0.9
    run["method"]["details"]["votes"] = "softmax >= 0.9"

  edit_run(f, other)  # the rule is the same for any threshold: only the votes can tell
  assert _caught(model, f)
