"""Certificates anyone can check: the record, `rsjax verify`, `rsjax audit`, and injected faults.

Every fault of the issue must be caught (an edited count, an edited radius, a
swapped checkpoint, noise scaled by 0.9, a changed alpha) and honest runs must
pass; the false-alarm rate of the noise tests is measured over many honest keys.
"""

import json
import shutil

import jax
import numpy as np
import pytest

from run_edits import copy_run, move_one_count
from rsjax import audit, cli, io, record, verify
from rsjax import noise as noise_lib

N, N0 = 500, 50


def run_cli(*argv):
  return cli.main([str(a) for a in argv])


def certify(model, out, *more):
  assert run_cli("certify", model, out, "--N", N, "--N0", N0, "--skip", "60", "--batch", "500",
                 "--quiet", *more) == 0
  return out


@pytest.fixture(scope="module")
def models(tmp_path_factory):
  base = tmp_path_factory.mktemp("models")
  out = []
  for seed in (0, 1):
    d = base / f"mlp{seed}"
    assert run_cli("train", "--dataset", "digits", "--model", "mlp", "--sigma", "0.25", "--epochs",
                   "2", "--batch", "64", "--lr", "0.1", "--seed", seed, "--out", d, "--quiet") == 0
    out.append(d)
  return out


@pytest.fixture(scope="module")
def honest(models, tmp_path_factory):
  return certify(models[0], tmp_path_factory.mktemp("runs") / "honest.tsv")




def edit_lines(path, fn):
  lines = path.read_text().split("\n")
  path.write_text("\n".join(fn(lines)))


def test_record_has_what_a_third_party_needs(honest):
  res = io.read_certify(honest)
  cert = io.read_run_record(honest)["certificate"]
  assert cert["sampling"]["n"] == N and cert["sampling"]["n0"] == N0
  assert cert["sampling"]["alpha"] == 0.001 and cert["sigma"] == 0.25
  assert cert["noise"] == {"family": "gaussian", "name": "gaussian", "norm": "l2"}
  assert cert["key"]["seed"] == 0 and "fold_in(K, 1), idx), j)" in cert["key"]["derivation"]
  assert set(cert["versions"]) >= {"rsjax", "jax", "jaxlib"} and cert["model"]
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
  # A forger who also rewrites the radius to match passes verify, not the audit.
  recs = record.read_records(f)
  n_a = recs[idx]["counts"][max(recs[idx]["counts0"], key=lambda k: recs[idx]["counts0"][k])]
  from scipy import stats as st
  r = 0.25 * st.norm.ppf(st.beta.ppf(0.001, n_a, N - n_a + 1))

  def fix(lines):
    fields = lines[1 + j].split("\t")
    fields[3] = repr(float(r))
    lines[1 + j] = "\t".join(fields)
    return lines

  edit_lines(f, fix)
  assert verify.verify(f).ok
  a = audit.audit(f, model_dir=models[0], rows=5)
  assert not a.ok and a.reason.startswith("counts: 1 of 5 rows")
  assert f"first idx {idx}: estimation counts" in a.reason


def test_changed_alpha_is_caught(models, honest, tmp_path):
  # The record claims alpha 0.0001 for rows certified at 0.001.
  f = copy_run(honest, tmp_path / "a.tsv")
  run = io.read_run_record(f)
  run["certificate"]["sampling"]["alpha"] = 0.0001
  io.write_run_record(f, run)
  rep = verify.verify(f)
  res = io.read_certify(f)
  assert {m.idx for m in rep.mismatches} == {int(i) for i in res.idx[res.radius > 0]}
  # Rows certified at alpha 0.01 pasted under the record of an alpha-0.001 run.
  g = certify(models[0], tmp_path / "a01.tsv", "--alpha", "0.01")
  shutil.copy(str(f) + ".run.json", str(g) + ".run.json")
  run = io.read_run_record(g)
  run["certificate"]["sampling"]["alpha"] = 0.001
  io.write_run_record(g, run)
  res = io.read_certify(g)
  assert {m.idx for m in verify.verify(g).mismatches} == {int(i) for i in res.idx[res.radius > 0]}


def test_swapped_checkpoint_is_caught(models, honest, capsys):
  a = audit.audit(honest, model_dir=models[1], rows=5)
  assert not a.ok and a.reason.startswith("model: the model's parameters")
  assert not next(c for c in a.checks if c.name == "counts").ok
  assert run_cli("audit", honest, "--model-dir", models[1], "--quiet") == 1
  out = capsys.readouterr().out.strip().split("\n")
  assert len(out) == 1 and out[0].startswith("audit FAILED") and "another checkpoint" in out[0]


@pytest.fixture
def scaled_noise(monkeypatch):
  """The attack of arXiv 2306.14043: the noise generator draws 0.9 times the noise."""
  honest_normal = noise_lib.standard_normal
  monkeypatch.setattr(noise_lib, "standard_normal",
                      lambda *a, **k: 0.9 * honest_normal(*a, **k))
  jax.clear_caches()  # compiled samplers would keep the honest generator
  yield
  monkeypatch.undo()
  jax.clear_caches()


def test_noise_scaled_by_0_9_is_caught(models, honest, tmp_path, scaled_noise):
  f = certify(models[0], tmp_path / "s.tsv")
  res, ref = io.read_certify(f), io.read_certify(honest)
  assert verify.verify(f).ok  # the counts are consistent with the radii: verify cannot see it
  assert res.radius.sum() > ref.radius.sum()  # the attack inflates the radii
  a = audit.audit(f, model_dir=models[0], rows=5)  # audited with the tampered generator
  assert not a.ok and a.reason.startswith("noise variance"), a.reason
  assert "ratio of scales 0.9" in a.reason
  assert next(c for c in a.checks if c.name == "counts").ok


def test_noise_scaled_run_fails_an_audit_with_honest_noise(models, tmp_path, monkeypatch):
  honest_normal = noise_lib.standard_normal
  monkeypatch.setattr(noise_lib, "standard_normal", lambda *a, **k: 0.9 * honest_normal(*a, **k))
  jax.clear_caches()
  f = certify(models[0], tmp_path / "s.tsv")
  monkeypatch.undo()
  jax.clear_caches()
  a = audit.audit(f, model_dir=models[0], rows=5)
  assert not a.ok and not next(c for c in a.checks if c.name == "counts").ok
  assert all(c.ok for c in a.checks if c.name.startswith("noise"))


def test_budgeted_and_multiclass_runs_verify(models, tmp_path):
  b = certify(models[0], tmp_path / "b.tsv", "--grid", "0,0.25,0.5", "--N", "4000")
  rep = verify.verify(b)
  assert rep.ok and rep.rows == 5, rep.mismatches
  recs = record.read_records(b)
  assert {r["n"] for r in recs.values()} <= set(io.read_run_record(b)["certificate"]["budget"]
                                               ["looks"])
  assert audit.audit(b, model_dir=models[0], rows=2).ok
  # Spending more alpha on the looks than declared is caught.
  run = io.read_run_record(b)
  run["certificate"]["budget"]["alphas"] = [0.001] * len(run["certificate"]["budget"]["looks"])
  io.write_run_record(b, run)
  rep = verify.verify(b)
  assert not rep.ok and "alpha levels" in rep.mismatches[0].reason
  m = certify(models[0], tmp_path / "m.tsv", "--multiclass")
  assert verify.verify(m).ok
  run = io.read_run_record(m)
  run["certificate"]["multiclass"] = False  # the binary radius differs from the multiclass one
  io.write_run_record(m, run)
  res = io.read_certify(m)
  assert {x.idx for x in verify.verify(m).mismatches} == {int(i) for i in res.idx[res.radius > 0]}


def test_missing_record_is_an_error_in_cli_words(honest, tmp_path, capsys):
  f = tmp_path / "plain.tsv"
  shutil.copy(honest, f)
  with pytest.raises(verify.VerifyError, match="no certificate record"):
    verify.verify(f)
  assert run_cli("verify", f) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith("rsjax verify: error:") and "\n" not in err
  g = copy_run(honest, tmp_path / "norows.tsv")
  (tmp_path / "norows.tsv.cert.jsonl").write_text("")
  rep = verify.verify(g)
  assert len(rep.mismatches) == 5 and "no certificate record for this row" in rep.mismatches[0].reason


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


def _keys(n):
  return [jax.random.fold_in(jax.random.key(2026), i) for i in range(n)]


@pytest.mark.parametrize("name", ["gaussian", "laplace", "uniform"])
def test_noise_tests_false_alarm_rate_over_honest_keys(name):
  # 200 honest streams at a stated rate of 0.05: the number that fail is Binomial(200, <= 0.05),
  # so more than 22 happens with probability < 1e-3 (experiments/audit_false_alarms.py
  # measures the rates on MNIST-shaped audits).
  g = noise_lib.get_noise(name)
  fails = 0
  for key in _keys(200):
    eps = audit.draw_noise(g, key, [3, 7], 50, (8, 8))
    fails += not all(c.ok for c in audit.noise_tests(g, eps, false_alarm=0.05))
  assert fails <= 22, fails


@pytest.mark.parametrize("name", ["laplace", "uniform"])
def test_noise_tests_know_each_family(name):
  fam = noise_lib.get_noise(name)
  eps = audit.draw_noise(fam, jax.random.key(3), [0, 1], 200, (8, 8))
  assert all(c.ok for c in audit.noise_tests(fam, eps, false_alarm=1e-3))
  assert not all(c.ok for c in audit.noise_tests(fam, 0.9 * eps, false_alarm=1e-3))


def test_noise_tests_catch_each_defect():
  g = noise_lib.get_noise("gaussian")
  for key in _keys(10):
    eps = audit.draw_noise(g, key, [0, 1, 2], 300, (8, 8))  # 57,600 values
    by = lambda e: {c.name: c.ok for c in audit.noise_tests(g, e, false_alarm=1e-3)}  # noqa: E731
    assert not by(0.9 * eps)["noise variance"]
    assert not by(eps + 0.05)["noise mean"]
    assert not by(np.sign(eps) * np.sqrt(np.abs(eps)) * 1.2)["noise distribution"]
    same = np.repeat(eps[:, :1], eps.shape[1], axis=1)  # noise reused for every sample
    assert not by(same)["noise independence across samples"]
    smooth = eps + np.roll(eps, 1, axis=-1)  # neighbouring pixels share noise
    assert not by(smooth / np.sqrt(2))["noise independence across coordinates"]
