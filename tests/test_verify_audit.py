"""Certificates anyone can check: the record, `rsjax verify`, `rsjax audit`, and injected faults.

Every fault must be caught (an edited count, an edited radius, a swapped
checkpoint, noise scaled by 0.9, a changed alpha) and honest runs must pass.
The forgeries of a run's one record are in ``test_forgeries.py``.
"""

import json
import shutil

import jax
import numpy as np
import pytest
from run_edits import copy_run, edit_run, move_one_count, reradius

from rsjax import claims as checks
from rsjax import noise as noise_lib
from rsjax import verify
from rsjax.app import audit, cli
from rsjax.engine import anytime
from rsjax.records import io
from rsjax.records import spec as runspec
from rsjax.records.spec import KEY_DERIVATION, RunSpec
from rsjax.runs import record

N, N0 = 500, 50


def run_cli(*argv):
  return cli.main([str(a) for a in argv])


def certify(model, out, *more):
  assert (
    run_cli(
      "certify",
      model,
      out,
      "--N",
      N,
      "--N0",
      N0,
      "--skip",
      "60",
      "--batch",
      "500",
      "--quiet",
      *more,
    )
    == 0
  )
  return out


@pytest.fixture(scope="module")
def models(tmp_path_factory):
  base = tmp_path_factory.mktemp("models")
  out = []
  for seed in (0, 1):
    d = base / f"mlp{seed}"
    assert (
      run_cli(
        "train",
        "--dataset",
        "digits",
        "--model",
        "mlp",
        "--sigma",
        "0.25",
        "--epochs",
        "2",
        "--batch",
        "64",
        "--lr",
        "0.1",
        "--seed",
        seed,
        "--out",
        d,
        "--quiet",
      )
      == 0
    )
    out.append(d)
  return out


@pytest.fixture(scope="module")
def honest(models, tmp_path_factory):
  return certify(models[0], tmp_path_factory.mktemp("runs") / "honest.tsv")


def edit_lines(path, fn):
  lines = path.read_text().split("\n")
  path.write_text("\n".join(fn(lines)))


def test_record_has_what_a_third_party_needs(models, honest):
  res = io.read_certify(honest)
  run = RunSpec.read(honest)
  assert run.sampling.n == N and run.sampling.n0 == N0
  assert run.sampling.alpha == 0.001 and run.sigma == 0.25 and run.sigma_source == "model"
  assert (run.sampling.noise, run.noise_family, run.norm) == ("gaussian", "gaussian", "l2")
  assert run.seed == 0 and "fold_in(K, 1), idx), j)" in KEY_DERIVATION
  assert set(run.versions) >= {"rsjax", "jax", "jaxlib"} and run.model.fingerprint
  assert (run.data.name, run.data.split, run.data.skip, run.data.size) == (
    "digits",
    "test",
    60,
    300,
  )
  assert list(run.indices()) == [0, 60, 120, 180, 240]
  # The model's path relative to the result file's folder (issue 68), resolving to the model.
  from rsjax.records.paths import resolve

  assert not run.model.path.startswith("/") and resolve(run.model.path, honest) == str(models[0])
  # Each field once: the record is the value's JSON, nothing else.
  raw = json.loads((honest.parent / (honest.name + ".run.json")).read_text())
  assert RunSpec.from_json(raw) == run and set(raw) == {
    "format",
    "command",
    "model",
    "data",
    "sigma",
    "sampling",
    "method",
    "key",
    "versions",
  }
  recs = record.read_records(honest)
  assert sorted(recs) == sorted(int(i) for i in res.idx)
  for r in recs.values():
    assert sum(r["counts0"].values()) == N0 and sum(r["counts"].values()) == N
    assert r["input"].startswith("sha256:") and r["n"] == N
  # Existing readers see the plain file.
  assert io.read_certify(honest).extra == {}


def test_honest_run_verifies_and_audits(models, honest, capsys):
  rep = verify.verify(honest)
  assert rep.ok and rep.rows == 5, rep.mismatches
  assert run_cli("verify", honest) == 0
  assert "verified: all 5 rows" in capsys.readouterr().out
  a = audit.audit(honest, model_dir=models[0], rows=3)
  assert a.ok, a.reason
  assert len(a.rows) == 3
  assert run_cli("audit", honest, "--model-dir", models[0], "--rows", "2", "--quiet") == 0
  assert "audit passed" in capsys.readouterr().out


def test_edited_radius_is_caught(honest, tmp_path, capsys):
  f = copy_run(honest, tmp_path / "r.tsv")
  res = io.read_certify(f)
  j = int(np.flatnonzero(res.radius > 0)[0])

  def bump(lines):
    fields = lines[1 + j].split("\t")
    fields[3] = repr(float(fields[3]) * 1.5)
    lines[1 + j] = "\t".join(fields)
    return lines

  edit_lines(f, bump)
  rep = verify.verify(f)
  assert not rep.ok and [m.idx for m in rep.mismatches] == [int(res.idx[j])]
  assert "radius" in rep.mismatches[0].reason
  assert run_cli("verify", f) == 1
  out = capsys.readouterr().out
  assert f"idx {int(res.idx[j])}: radius" in out and "NOT verified: 1 of 5 rows" in out


def test_edited_count_is_caught_by_verify_and_audit(models, honest, tmp_path):
  f = copy_run(honest, tmp_path / "c.tsv")
  res = io.read_certify(f)
  j = int(np.flatnonzero(res.radius > 0)[0])
  idx = int(res.idx[j])

  def edit(lines):
    out = []
    for line in lines:
      if line and json.loads(line)["idx"] == idx:
        line = json.dumps(move_one_count(json.loads(line)), sort_keys=True)
      out.append(line)
    return out

  edit_lines(tmp_path / "c.tsv.cert.jsonl", edit)
  rep = verify.verify(f)
  assert [m.idx for m in rep.mismatches] == [idx]
  # A forger who also rewrites the bound and the radius to match passes verify, not the audit.
  reradius(f)
  assert verify.verify(f).ok
  a = audit.audit(f, model_dir=models[0], rows=5)
  assert not a.ok and a.reason.startswith("counts: 1 of 5 rows")
  assert f"first idx {idx}: estimation counts" in a.reason


def test_changed_alpha_is_caught(models, honest, tmp_path):
  # The record claims alpha 0.0001 for rows certified at 0.001: each bound and radius differs.
  f = copy_run(honest, tmp_path / "a.tsv")
  edit_run(f, lambda r: r["sampling"].update(alpha=0.0001))
  rep = verify.verify(f)
  res = io.read_certify(f)
  assert {m.idx for m in rep.mismatches} == {int(i) for i in res.idx}
  assert "p_lower" in rep.mismatches[0].reason
  # Rows certified at alpha 0.01 pasted under the record of an alpha-0.001 run.
  g = certify(models[0], tmp_path / "a01.tsv", "--alpha", "0.01")
  edit_run(g, lambda r: r["sampling"].update(alpha=0.001))
  res = io.read_certify(g)
  assert {m.idx for m in verify.verify(g).mismatches} == {int(i) for i in res.idx}


def test_swapped_checkpoint_is_caught(models, honest, capsys):
  a = audit.audit(honest, model_dir=models[1], rows=5)
  assert not a.ok and a.reason.startswith("model: the model's parameters")
  assert not next(c for c in a.checks if c.name == "counts").ok
  assert run_cli("audit", honest, "--model-dir", models[1], "--quiet") == 1
  out = capsys.readouterr().out.strip().split("\n")
  assert len(out) == 1 and out[0].startswith("audit FAILED") and "another checkpoint" in out[0]


@pytest.mark.heavy
def test_noise_scaled_run_fails_an_audit(models, tmp_path, monkeypatch):
  # The attack of arXiv 2306.14043: the run's noise generator draws 0.9 times the noise. Its
  # counts are consistent with its radii (verify passes); drawn again they differ.
  honest_normal = noise_lib.families.standard_normal  # the module the noise families call
  monkeypatch.setattr(
    noise_lib.families, "standard_normal", lambda *a, **k: 0.9 * honest_normal(*a, **k)
  )
  jax.clear_caches()  # compiled samplers would keep the honest generator
  f = certify(models[0], tmp_path / "s.tsv")
  monkeypatch.undo()
  jax.clear_caches()
  assert verify.verify(f).ok
  a = audit.audit(f, model_dir=models[0], rows=1)
  assert not a.ok and a.reason.startswith("counts: 1 of 1 rows"), a.reason


@pytest.mark.heavy
def test_budgeted_and_multiclass_runs_verify(models, tmp_path):
  b = certify(models[0], tmp_path / "b.tsv", "--grid", "0,0.25,0.5", "--N", "4000")
  rep = verify.verify(b)
  assert rep.ok and rep.rows == 5, rep.mismatches
  recs = record.read_records(b)
  looks = {1000, 2000, 4000}  # Budget's first look 1000, ratio 2, at most N
  assert {r["n"] for r in recs.values()} <= looks and RunSpec.read(b).details["budget"][
    "first"
  ] == 1000
  assert audit.audit(b, model_dir=models[0], rows=2).ok
  # Spending more alpha on the early looks than the run did (final share 0.01) is caught;
  # a negative share (alpha levels below 0) is no schedule at all.
  edit_run(b, lambda r: r["method"]["details"]["budget"].update(final_share=0.01))
  rep = verify.verify(b)
  assert not rep.ok and any("p_lower" in x.reason or "radius" in x.reason for x in rep.mismatches)
  edit_run(b, lambda r: r["method"]["details"]["budget"].update(final_share=-200))
  rep = verify.verify(b)
  assert not rep.ok and "is not one" in rep.mismatches[0].reason
  m = certify(models[0], tmp_path / "m.tsv", "--multiclass")
  assert verify.verify(m).ok
  assert audit.audit(m, model_dir=models[0], rows=2).ok
  # The binary radius differs from the multiclass one.
  edit_run(m, lambda r: r["method"].update(multiclass=False))
  res = io.read_certify(m)
  assert {x.idx for x in verify.verify(m).mismatches} == {int(i) for i in res.idx}


def test_anytime_budgeted_runs_verify(models, tmp_path):
  b = certify(
    models[0], tmp_path / "a.tsv", "--grid", "0,0.25,0.5", "--N", "4000", "--budget-rule", "anytime"
  )
  rep = verify.verify(b)
  assert rep.ok and rep.rows == 5, rep.mismatches
  budget = RunSpec.read(b).details["budget"]
  assert budget["rule"] == "anytime-kt-mixture" and budget["first"] == 100
  assert budget["mixture_share"] == anytime.Anytime(grid=(0.0,)).mixture_share
  assert budget["thresholds"].startswith("sha256:")
  looks = set(checks.anytime_looks(4000, budget["first"], budget["ratio"]))
  recs = record.read_records(b)
  assert {r["n"] for r in recs.values()} <= looks
  assert audit.audit(b, model_dir=models[0], rows=2).ok
  # A sample count that is no look, or another schedule, is caught.
  edit_run(b, lambda r: r["method"]["details"]["budget"].update(ratio=1.5))
  rep = verify.verify(b)
  assert not rep.ok and any("looks" in x.reason for x in rep.mismatches)
  edit_run(b, lambda r: r["method"]["details"]["budget"].update(ratio=0.5))
  rep = verify.verify(b)
  assert not rep.ok and "is not one" in rep.mismatches[0].reason
  # Another alpha split re-derives other levels; a share outside (0, 1) is refused.
  edit_run(b, lambda r: r["method"]["details"]["budget"].update(ratio=budget["ratio"]))
  rep = verify.verify(b)
  assert rep.ok, rep.summary()
  edit_run(b, lambda r: r["method"]["details"]["budget"].update(mixture_share=0.01))
  assert not verify.verify(b).ok
  edit_run(b, lambda r: r["method"]["details"]["budget"].update(mixture_share=1.0))
  rep = verify.verify(b)
  assert not rep.ok and "mixture_share" in rep.mismatches[0].reason
  # So does another prior weight on all-agree; a weight outside [0, 1) is refused.
  assert budget["agree_weight"] == anytime.Anytime(grid=(0.0,)).agree_weight
  edit_run(
    b, lambda r: r["method"]["details"]["budget"].update(mixture_share=budget["mixture_share"])
  )
  assert verify.verify(b).ok
  edit_run(b, lambda r: r["method"]["details"]["budget"].update(agree_weight=0.999))
  assert not verify.verify(b).ok
  edit_run(b, lambda r: r["method"]["details"]["budget"].update(agree_weight=1.0))
  rep = verify.verify(b)
  assert not rep.ok and "agree_weight" in rep.mismatches[0].reason
  # The thresholds the run used are named by their digest: others here are caught; a record
  # written before the digest has none to compare.
  edit_run(
    b, lambda r: r["method"]["details"]["budget"].update(agree_weight=budget["agree_weight"])
  )
  assert verify.verify(b).ok
  edit_run(b, lambda r: r["method"]["details"]["budget"].update(thresholds="sha256:0"))
  rep = verify.verify(b)
  assert not rep.ok and "anytime thresholds" in rep.mismatches[0].reason
  edit_run(b, lambda r: r["method"]["details"]["budget"].pop("thresholds") and None)
  rep = verify.verify(b)  # every rsjax-run/3 record states it
  assert not rep.ok and "no thresholds digest" in rep.mismatches[0].reason

  def unbound(r):  # a record written before the digest (rsjax-run/2): none to compare
    r["format"] = runspec.UNBOUND_FORMAT
    r["key"]["derivation"] = runspec.UNBOUND_KEY_DERIVATION
    r["key"].pop("claim")

  edit_run(b, unbound, restate_claim=False)
  assert verify.verify(b, accept_unbound=True).ok


def test_missing_record_is_an_error_in_cli_words(honest, tmp_path, capsys):
  f = tmp_path / "plain.tsv"
  shutil.copy(honest, f)
  with pytest.raises(verify.VerifyError, match="has no run record"):
    verify.verify(f)
  assert run_cli("verify", f) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith("rsjax verify: error:") and "\n" not in err
  g = copy_run(honest, tmp_path / "norows.tsv")
  (tmp_path / "norows.tsv.cert.jsonl").write_text("")
  rep = verify.verify(g)
  assert (
    len(rep.mismatches) == 5 and "no certificate record for this row" in rep.mismatches[0].reason
  )


def test_resume_keeps_record_and_rows_aligned(models, honest, tmp_path):
  f = copy_run(honest, tmp_path / "resumed.tsv")
  # Killed after the record line of idx 120 and before its row (rows 0 and 60 written), the
  # record line of idx 120 cut short.
  f.write_text("\n".join(f.read_text().split("\n")[:3]) + "\n")
  rec = tmp_path / "resumed.tsv.cert.jsonl"
  rec.write_text("\n".join(rec.read_text().split("\n")[:3]) + "\n" + '{"idx": 180, "cou')
  certify(models[0], f)
  assert record.read_records(f) == record.read_records(honest)
  assert verify.verify(f).ok
