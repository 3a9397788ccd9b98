"""``rsjax recertify``: the child run, its record linking the parent, verify, audit, forgeries."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

from rsjax import models, verify
from rsjax.app import audit, cli
from rsjax.records.spec import RunSpec

N, N0 = 400, 40


def run_cli(*argv):
  return cli.main([str(a) for a in argv])


@pytest.fixture(scope="module")
def family(tmp_path_factory):
  """A parent run (40 digits, sigma 0.5), its pruned child's model and the child's run."""
  root = tmp_path_factory.mktemp("recert")
  parent_dir = root / "mlp"
  assert run_cli("train", "--dataset", "digits", "--model", "mlp", "--sigma", "0.5", "--epochs",
                 "2", "--batch", "64", "--lr", "0.1", "--out", parent_dir, "--quiet") == 0  # fmt: skip
  parent = root / "parent.tsv"
  assert run_cli("certify", parent_dir, parent, "--N", N, "--N0", N0, "--batch", "400",
                 "--quiet", "--skip", "7", "--max", "280") == 0  # fmt: skip
  model, config = models.load_model(parent_dir)
  child_dir = root / "pruned"
  child = models.prune_magnitude(model, 0.6)
  models.save_child(child_dir, child, config, {"transform": "prune", "sparsity": 0.6})
  child = root / "child.tsv"
  assert run_cli("recertify", parent, child_dir, child, "--N", "200", "--quiet") == 0
  return {"root": root, "parent_dir": parent_dir, "parent": parent, "child_dir": child_dir,
          "child": child}  # fmt: skip


def _copy(src, dst):
  for suffix in ("", ".run.json", ".cert.jsonl"):
    shutil.copy(str(src) + suffix, str(dst) + suffix)
  return dst


def _copy_child(family, dst):
  """The child run copied to ``dst``, its parent beside it (as the child's record names it:
  relative to the child's folder)."""
  _copy(family["parent"], dst.parent / family["parent"].name)
  return _copy(family["child"], dst)


@pytest.mark.heavy
def test_the_child_verifies_and_passes_the_audit(family):
  child = RunSpec.read(family["child"])
  parent = RunSpec.read(family["parent"])
  assert child.method == "recertify"
  assert child.options["parent_claim"] == parent.claim_digest()
  assert child.options["parent_model"] == parent.model.fingerprint
  assert child.model.fingerprint != parent.model.fingerprint
  assert child.key_path() != parent.key_path()
  assert child.details["alpha"] == pytest.approx(0.002)
  report = verify.verify(family["child"])
  assert report.ok, report.summary()
  rows = [json.loads(line) for line in open(str(family["child"]) + ".cert.jsonl")]
  assert all(r["n"] == 200 and r["counts0"] is None for r in rows)
  a = audit.audit(family["child"], model_dir=family["child_dir"], rows=5, seed=1,
                  parent_model_dir=family["parent_dir"])  # fmt: skip
  assert a.ok, a.reason


def _edit_records(path, fn):
  rec = str(path) + ".cert.jsonl"
  rows = [json.loads(line) for line in open(rec)]
  rows = [fn(r) for r in rows]
  with open(rec, "w") as f:
    f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in rows)


def test_edited_disagreement_counts_fail_verify(family, tmp_path):
  f = _copy_child(family, tmp_path / "c.tsv")

  def fewer(r):
    r["counts"] = {"0": 200}
    return r

  _edit_records(f, fewer)
  report = verify.verify(f)
  assert not report.ok and "zeta" in str(report.mismatches[0])


def test_consistently_edited_counts_fail_the_audit(family, tmp_path):
  """Counts, zeta, p_lower and radius all rewritten to agree: verify passes, the audit does
  not (the counts drawn again are the child's)."""
  from rsjax.claims import cp_upper
  from rsjax.cohen._recertify_check import _child_certificate
  from rsjax.records import io

  f = _copy_child(family, tmp_path / "c.tsv")
  res = io.read_certify(f)
  recs = {r["idx"]: r for r in (json.loads(x) for x in open(str(f) + ".cert.jsonl"))}
  assert sum(r["counts"].get("1", 0) > 0 for r in recs.values()) >= 5  # it does disagree
  lines = open(f).read().splitlines()
  header = lines[0].split("\t")
  out = [lines[0]]
  for j, line in enumerate(lines[1:]):
    cells = line.split("\t")
    idx = int(cells[0])
    r = recs[idx]
    r["counts"] = {"0": 200}
    z = float(cp_upper(0, 200, 0.001))
    p = r["parent"]
    pred, radius, pl = _child_certificate(np.array([p["predict"]]), np.array([p["p_lower"]]),
                                          np.array([1.0]), np.array([z]), 0.5, False)  # fmt: skip
    r["zeta"], r["p_lower"] = z, float(pl[0])
    cells[header.index("zeta")] = repr(z)
    cells[header.index("predict")] = str(int(pred[0]))
    cells[header.index("radius")] = repr(float(radius[0]))
    cells[header.index("correct")] = str(int(int(pred[0]) == int(res.label[j])))
    out.append("\t".join(cells))
  open(f, "w").write("\n".join(out) + "\n")
  _edit_records(f, lambda r: recs[r["idx"]])
  assert verify.verify(f).ok
  a = audit.audit(f, model_dir=family["child_dir"], rows="all", seed=1,
                  parent_model_dir=family["parent_dir"])  # fmt: skip
  assert not a.ok and "counts" in a.reason


@pytest.mark.parametrize(
  "flags,why",
  [
    (("--seed", "5"), "changed since the child"),  # the same claim (the seed is not one)
    (("--alpha", "0.01"), "another claim"),
  ],
)
def test_a_swapped_parent_fails_verify(family, tmp_path, flags, why):
  other = tmp_path / "other.tsv"
  assert run_cli("certify", family["parent_dir"], other, "--N", N, "--N0", N0, "--batch", "400",
                 "--quiet", "--skip", "7", "--max", "280", *flags) == 0  # fmt: skip
  # The parent's files replaced by another run's, at the path the child names.
  saved = _copy(family["parent"], tmp_path / "saved.tsv")
  try:
    _copy(other, family["parent"])
    report = verify.verify(family["child"])
  finally:
    _copy(saved, family["parent"])
  assert not report.ok
  assert any(why in str(m) for m in report.mismatches), report.mismatches[:3]


def test_a_parent_rewritten_after_the_child_fails_verify(family, tmp_path):
  parent = _copy(family["parent"], tmp_path / "p.tsv")
  f = _copy(family["child"], tmp_path / "c.tsv")
  rec = json.loads(open(str(f) + ".run.json").read())
  rec["method"]["options"]["parent"] = str(parent)
  open(str(f) + ".run.json", "w").write(json.dumps(rec))
  # the child's claim named the parent at its old path: certify the same child again here
  assert not verify.verify(f).ok  # the claim digest moved with the path
  shutil.copytree(family["parent_dir"], tmp_path / "mlp")  # where the parent's record names it
  g = tmp_path / "c2.tsv"
  assert run_cli("recertify", parent, family["child_dir"], g, "--N", "200", "--quiet") == 0
  assert verify.verify(g).ok
  _edit_records(parent, lambda r: {**r, "p_lower": r["p_lower"]})  # same content, rewritten
  assert verify.verify(g).ok

  def more(r):  # one row's counts moved to the top class: the parent's bound rises
    c = r["counts"]
    top = max(c, key=c.get)
    r["counts"] = {top: sum(c.values())}
    return r

  _edit_records(parent, more)
  report = verify.verify(g)
  assert not report.ok
  assert any("changed since the child" in str(m) for m in report.mismatches)


def test_a_missing_parent_is_refused(family, tmp_path):
  parent = _copy(family["parent"], tmp_path / "p.tsv")
  shutil.copytree(family["parent_dir"], tmp_path / "mlp")  # where the parent's record names it
  g = tmp_path / "c.tsv"
  assert run_cli("recertify", parent, family["child_dir"], g, "--N", "200", "--quiet") == 0
  for suffix in ("", ".run.json", ".cert.jsonl"):
    (tmp_path / ("p.tsv" + suffix)).unlink()
  with pytest.raises(verify.VerifyError, match="--parent"):  # cannot verify: not a failure
    verify.verify(g)


def test_a_parent_that_does_not_verify_is_refused(family, tmp_path, capsys):
  parent = _copy(family["parent"], tmp_path / "p.tsv")
  _edit_records(parent, lambda r: {**r, "p_lower": 0.99})
  assert run_cli("recertify", parent, family["child_dir"], tmp_path / "c.tsv", "--quiet") == 2
  assert "does not verify" in capsys.readouterr().err


def test_a_circle_of_parents_is_a_mismatch_not_a_recursion(family, tmp_path):
  """Two child records naming each other as parent: verify says so in one mismatch (it
  recursed into the parent's parent without end)."""
  a, b = _copy(family["child"], tmp_path / "a.tsv"), _copy(family["child"], tmp_path / "b.tsv")
  for f, other in ((a, b), (b, a)):
    rec = json.loads(open(str(f) + ".run.json").read())
    rec["method"]["options"]["parent"] = str(other)
    open(str(f) + ".run.json", "w").write(json.dumps(rec))
  report = verify.verify(a)
  assert not report.ok
  assert any("itself certified from a parent" in str(m) for m in report.mismatches)


def test_the_audit_draws_the_parent_again_with_its_model(family, capsys):
  """``audit --parent-model-dir``: the parent run the child names is audited too, as a check."""
  argv = ("audit", family["child"], "--model-dir", family["child_dir"], "--rows", "3")
  assert run_cli(*argv, "--parent-model-dir", family["parent_dir"], "--seed", "4") == 0
  assert re.search(r"ok +parent:", capsys.readouterr().out)
  # the parent audited with another model (the child's) fails the child's audit
  assert run_cli(*argv, "--parent-model-dir", family["child_dir"], "--seed", "4") == 1


def test_a_fallback_row_records_its_own_counts():
  """Red team 7: the k-th fallback row took ``min(j, rows)`` of the fallback's certificate (an
  IndexError, or another row's counts), not the number of fallback rows before it."""
  import rsjax
  from rsjax.cohen._recertify import Recertified

  fb = rsjax.Certificate(
    prediction=np.array([3, 7]), radius=np.array([0.1, 0.2]), p_lower=np.array([0.6, 0.7]),
    counts=np.array([[0] * 3 + [5] + [0] * 6, [0] * 7 + [9] + [0] * 2]), counts_selection=None,
  )  # fmt: skip
  four = np.zeros(4)
  cert = Recertified(
    prediction=np.array([1, 3, 2, 7]), radius=four, p_lower=four, counts=np.zeros((4, 2), int),
    counts_selection=None, zeta=four, parent_prediction=np.array([1, -1, 2, -1]),
    parent_p_lower=four, fallback=np.array([False, True, False, True]), fallback_cert=fb,
  )  # fmt: skip
  assert cert.record_fields(1)["fallback"]["counts"] == {"3": 5}
  assert cert.record_fields(3)["fallback"]["counts"] == {"7": 9}


def test_a_child_of_another_split_than_its_parent_is_refused(family, tmp_path):
  """Red team 7: a child declared on the train split took the test rows' parent bounds."""
  f = _copy_child(family, tmp_path / "s.tsv")
  rec = json.loads(open(str(f) + ".run.json").read())
  rec["data"]["split"] = "train"
  rec["key"]["claim"] = RunSpec.from_json(rec).claim_digest()
  open(str(f) + ".run.json", "w").write(json.dumps(rec))
  report = verify.verify(f)
  assert any("split" in str(m) and "parent" in str(m) for m in report.mismatches), report


def test_auditing_a_child_needs_its_parents_model(family, capsys):
  assert run_cli("audit", family["child"], "--model-dir", family["child_dir"]) == 2
  assert "--parent-model-dir" in capsys.readouterr().err


def test_the_record_names_the_parent_relative_to_the_child(family):
  """The parent file and the models are recorded relative to the result file's folder."""
  child, parent = RunSpec.read(family["child"]), RunSpec.read(family["parent"])
  assert child.options["parent"] == "parent.tsv"
  assert parent.model.path == "mlp" and child.model.path == "pruned"


def test_a_moved_family_checks_from_another_directory(family, tmp_path, monkeypatch, capsys):
  """Red team 8: from another directory an honest child was "NOT verified", and a child whose
  parent model moved failed its audit even with the right --parent-model-dir."""
  runs, models_dir, elsewhere = tmp_path / "runs", tmp_path / "models", tmp_path / "cwd"
  for d in (runs, models_dir, elsewhere):
    d.mkdir()
  _copy_child(family, runs / "child.tsv")
  for name in ("mlp", "pruned"):  # the models moved away from where the records name them
    shutil.copytree(family[{"mlp": "parent_dir", "pruned": "child_dir"}[name]], models_dir / name)
  monkeypatch.chdir(elsewhere)
  assert verify.verify(runs / "child.tsv").ok
  assert run_cli("verify", runs / "child.tsv") == 0
  a = audit.audit(runs / "child.tsv", model_dir=models_dir / "pruned", rows=3, seed=2,
                  parent_model_dir=models_dir / "mlp")  # fmt: skip
  assert a.ok, a.reason
  assert [c.name for c in a.checks][-1] == "parent"
  # a parent model that is not there: cannot audit (exit 2), never FAILED
  argv = ("audit", runs / "child.tsv", "--model-dir", models_dir / "pruned", "--rows", "2")
  capsys.readouterr()
  assert run_cli(*argv, "--parent-model-dir", tmp_path / "gone") == 2
  assert "--parent-model-dir" in capsys.readouterr().err


def test_a_parent_moved_away_is_given_with_parent(family, tmp_path, capsys):
  """The child alone in its folder: verify and audit refuse (exit 2) until told the parent."""
  f = _copy(family["child"], tmp_path / "c.tsv")
  assert run_cli("verify", f) == 2
  assert "--parent" in capsys.readouterr().err
  assert run_cli("verify", f, "--parent", family["parent"]) == 0
  argv = ("audit", f, "--model-dir", family["child_dir"], "--rows", "2", "--seed", "3",
          "--parent-model-dir", family["parent_dir"])  # fmt: skip
  assert run_cli(*argv) == 2
  assert run_cli(*argv, "--parent", family["parent"]) == 0


def test_a_child_of_other_classes_is_refused(family, tmp_path, capsys):
  """Red team 8: a 3-class model was accepted as the child of a 10-class parent."""
  small = models.create_model("mlp", num_classes=3, input_shape=(8, 8, 1), rngs=0)
  config = {"model": "mlp", "num_classes": 3, "input_shape": [8, 8, 1], "sigma": 0.5}
  models.save_model(tmp_path / "three", small, config)
  out = tmp_path / "c3.tsv"
  assert run_cli("recertify", family["parent"], tmp_path / "three", out, "--N", "50") == 2
  assert "3 classes" in capsys.readouterr().err


@pytest.fixture(scope="module")
def switched(family):
  """The pruned child recertified with the gamma switch at 0.9 (the parent's N 400 reaches
  p_A_lower 0.98), N0 40, N 300."""
  child = family["root"] / "switched.tsv"
  assert run_cli("recertify", family["parent"], family["child_dir"], child, "--N", "300",
                 "--N0", "40", "--gamma", "0.9", "--quiet") == 0  # fmt: skip
  return child


@pytest.mark.heavy
def test_switched_rows_verify_and_pass_the_audit(family, switched):
  """Rows whose parent p_A_lower >= gamma are certified from scratch (fallback column 2, no
  disagreement samples, alpha_1 + alpha_2 stated); verify derives them and the audit draws
  them again."""
  run = RunSpec.read(switched)
  assert run.options["gamma"] == 0.9 and run.details["alpha"] == pytest.approx(0.002)
  rows = [json.loads(line) for line in open(str(switched) + ".cert.jsonl")]
  on = [r for r in rows if "switched" in r]
  assert on and len(on) < len(rows)
  assert all(r["counts"] == {} and sum(r["switched"]["counts"].values()) == 300 for r in on)
  assert all(r["parent"]["p_lower"] >= 0.9 for r in on)
  assert all(r["parent"]["p_lower"] < 0.9 for r in rows if "switched" not in r)
  report = verify.verify(switched)
  assert report.ok, report.summary()
  a = audit.audit(switched, model_dir=family["child_dir"], rows=5, seed=1,
                  parent_model_dir=family["parent_dir"])  # fmt: skip
  assert a.ok, a.reason


def test_an_edited_switched_row_fails_verify(family, switched, tmp_path):
  _copy(family["parent"], tmp_path / family["parent"].name)
  f = _copy(switched, tmp_path / "s.tsv")

  def more(r):
    if "switched" in r:
      top = max(r["switched"]["counts"], key=r["switched"]["counts"].get)
      r["switched"]["counts"] = {top: 300}
    return r

  _edit_records(f, more)
  report = verify.verify(f)
  assert not report.ok


def test_a_switched_row_dropped_to_the_bound_fails_verify(family, switched, tmp_path):
  """A switched row rewritten as a bound row (the switch hidden) is a mismatch."""
  _copy(family["parent"], tmp_path / family["parent"].name)
  f = _copy(switched, tmp_path / "s.tsv")

  def hide(r):
    if r.pop("switched", None) is not None:
      r["counts"] = {"0": 300}
    return r

  _edit_records(f, hide)
  report = verify.verify(f)
  assert not report.ok and "switched" in str(report.mismatches[0])
