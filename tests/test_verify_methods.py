"""`rsjax verify` for the methods beyond Cohen's: IDRS, UCAN (and what they record).

Each method's honest run through the command verifies clean; an edited radius
and an edited count are each caught.
"""

import shutil

import numpy as np
import pytest
from run_edits import copy_run, edit_column, edit_record, edit_run, move_one_count

from rsjax import verify
from rsjax.app import cli
from rsjax.records import io
from rsjax.records.spec import RunSpec
from rsjax.runs import record

COMMON = ["--N", "300", "--N0", "30", "--batch", "300", "--skip", "60", "--quiet"]


def run_cli(*argv):
  return cli.main([str(a) for a in argv])


def assert_caught(f, idx, *needles):
  """Verify reports row ``idx`` alone, for one of ``needles`` (the bound or a radius)."""
  rep = verify.verify(f)
  assert not rep.ok, "the edit went unnoticed"
  assert [m.idx for m in rep.mismatches] == [idx], rep.mismatches
  assert any(n in rep.mismatches[0].reason for n in needles), rep.mismatches[0].reason


def check_method(src, tmp_path, *, column="radius"):
  """An honest run verifies; an edited radius (x1.5 and x0.9) and an edited count are caught."""
  rep = verify.verify(src)
  assert rep.ok and rep.rows == 5, rep.mismatches
  res = io.read_certify(src)
  j = int(np.flatnonzero(res.radius > 0)[0])
  idx = int(res.idx[j])
  for factor in (1.5, 0.9):
    f = copy_run(src, tmp_path / f"r{factor}.tsv")
    edit_column(f, j, column, lambda v, factor=factor: repr(float(v) * factor))
    assert_caught(f, idx, column)
  f = copy_run(src, tmp_path / "c.tsv")
  edit_record(f, idx, move_one_count)
  assert_caught(f, idx, "p_lower", column)
  return res


# ----------------------------------------------------------------------------- idrs


@pytest.fixture(scope="module")
def idrs_run(trained, tmp_path_factory):
  out = tmp_path_factory.mktemp("idrs") / "idrs.tsv"
  assert (
    run_cli(
      "certify",
      trained,
      out,
      "--method",
      "idrs",
      "--idrs-rate",
      "0.05",
      "--idrs-k",
      "5",
      "--idrs-m",
      "1.0",
      *COMMON,
    )
    == 0
  )
  return out


def test_idrs_records_sigma_slack_rate_and_the_design(idrs_run):
  d = RunSpec.read(idrs_run).details
  assert d["kind"] == "knn" and d["rate"] == 0.05 and d["k"] == 5 and d["m"] == 1.0
  res = io.read_certify(idrs_run)
  recs = record.read_records(idrs_run)
  for j, i in enumerate(res.idx):
    r = recs[int(i)]
    assert r["sigma"] == float(res.extra["sigma"][j]) and r["slack"] > 0 and r["rate"] > 0.05


def test_idrs_verifies_and_catches_edits(idrs_run, tmp_path):
  res = check_method(idrs_run, tmp_path)
  # A forged sigma(x) (larger sigma, larger radius) no longer follows from the design.
  j = int(np.flatnonzero(res.radius > 0)[0])
  f = copy_run(idrs_run, tmp_path / "s.tsv")
  edit_record(f, int(res.idx[j]), lambda r: {**r, "sigma": r["sigma"] * 1.2})
  edit_column(f, j, "sigma", lambda v: repr(float(v) * 1.2))
  assert_caught(f, int(res.idx[j]), "does not follow from the design")


def test_an_idrs_radius_raised_within_the_search_tolerance_is_caught(idrs_run, tmp_path):
  """Red team 6: a radius raised into the bisection's last bracket (still sound by Thm 3.2 at
  margin 0, below Cohen's radius) passed verify and the audit; it is not what the search
  returns, replayed by the check."""
  from scipy import special

  from rsjax.idrs._check import _idrs_holds

  res, recs, run = io.read_certify(idrs_run), record.read_records(idrs_run), RunSpec.read(idrs_run)
  d = run.details
  dim = int(np.prod(run.data.input_shape))
  for j in np.flatnonzero(res.radius > 0):
    r, claim = recs[int(res.idx[j])], float(res.radius[j])
    p = min(float(r["p_lower"]), 1.0 - 1e-12)
    cohen = r["sigma"] * float(special.ndtri(p))
    args = (r["sigma"], 1.0 - p, r["rate"], r["slack"], dim, d["max_noncentrality"])
    lo, hi = claim, min(claim + d["radius_rtol"] * cohen + d["radius_atol"], cohen)
    for _ in range(60):  # the supremum at margin 0 above the claim
      mid = 0.5 * (lo + hi)
      lo, hi = (mid, hi) if _idrs_holds(mid, *args, margin=0.0) else (lo, mid)
    if lo > claim * (1 + 1e-8):
      break
  else:
    pytest.skip("no row leaves room above its radius at this size")
  f = copy_run(idrs_run, tmp_path / "up.tsv")
  edit_column(f, int(j), "radius", lambda v: repr(lo))
  assert_caught(f, int(res.idx[j]), "the search of Thm 3.2 gives")


def test_idrs_constant_sigma_is_cohens_radius(trained, tmp_path):
  out = tmp_path / "idrs0.tsv"
  assert run_cli("certify", trained, out, "--method", "idrs", "--idrs-rate", "0", *COMMON) == 0
  assert RunSpec.read(out).details["kind"] == "constant"
  check_method(out, tmp_path)


# ----------------------------------------------------------------------------- ucan


@pytest.mark.parametrize("pattern", ["linf", "l2"])
def test_ucan_pattern_verifies_and_catches_edits(trained, tmp_path, pattern):
  out = tmp_path / "ucan.tsv"
  assert (
    run_cli(
      "certify",
      trained,
      out,
      "--method",
      "ucan",
      "--ucan-pattern",
      pattern,
      "--ucan-kappa",
      "0.5",
      "--sigma",
      "0.3",
      *COMMON,
    )
    == 0
  )
  d = RunSpec.read(out).details
  assert d["source"] == "pattern" and d["pattern"] == pattern and d["sigma_min"] > 0
  res = check_method(out, tmp_path)
  for column in ("normalized_radius", "alm"):
    f = copy_run(out, tmp_path / f"{column}.tsv")
    j = int(np.flatnonzero(res.radius > 0)[0])
    edit_column(f, j, column, lambda v: repr(float(v) * 1.01))
    assert_caught(f, int(res.idx[j]), column)
  # A sound flag of 0 is no certificate; a sigma that is not the pattern's is caught.
  f = copy_run(out, tmp_path / "sound.tsv")
  edit_column(f, 0, "sound", lambda v: "0")
  assert_caught(f, int(res.idx[0]), "sound 0")
  f = copy_run(out, tmp_path / "sig.tsv")
  edit_run(
    f, lambda r: r["method"]["details"].update(sigma_min=r["method"]["details"]["sigma_min"] * 1.1)
  )
  rep = verify.verify(f)
  assert not rep.ok and rep.mismatches[0].idx == -1 and "pattern" in rep.mismatches[0].reason


def test_ucan_dataset_wise_verifies(trained, tmp_path):
  from rsjax import ucan

  wd = tmp_path / "wd"
  shutil.copytree(trained, wd)
  rng = np.random.default_rng(0)
  sigma = rng.uniform(0.2, 0.4, (8, 8, 1)).astype(np.float32)
  ucan.save_universal_noise(wd, mu=np.zeros((8, 8, 1), np.float32), sigma=sigma)
  out = tmp_path / "ucan_ds.tsv"
  assert run_cli("certify", wd, out, "--method", "ucan", *COMMON) == 0
  d = RunSpec.read(out).details
  assert d["source"] == "dataset" and d["sigma_min"] == float(sigma.min())
  check_method(out, tmp_path)


# ----------------------------------------------------------------------------- srs


@pytest.fixture(scope="module")
def deq_model(tmp_path_factory):
  out = tmp_path_factory.mktemp("deq") / "deq"
  assert (
    run_cli(
      "train",
      "--dataset",
      "digits",
      "--model",
      "deq",
      "--sigma",
      "0.25",
      "--epochs",
      "1",
      "--batch",
      "64",
      "--lr",
      "0.05",
      "--out",
      out,
      "--quiet",
    )
    == 0
  )
  return out


def edit_check(r):
  """One more check sample agrees with the full solver than recorded (k + 1, or m_A - 1)."""
  if r["k"] < r["m_a"]:
    r["k"] += 1
  else:
    r["m_a"] -= 1
    r["k"] -= 1
  return r


@pytest.mark.heavy
@pytest.mark.parametrize("correction", ["paper", "authors_code"])
def test_srs_verifies_and_catches_edits(deq_model, tmp_path, correction):
  out = tmp_path / "srs.tsv"
  assert (
    run_cli(
      "certify",
      deq_model,
      out,
      "--method",
      "srs",
      "--srs-m",
      "60",
      "--N",
      "300",
      "--N0",
      "30",
      "--batch",
      "100",
      "--skip",
      "60",
      "--srs-correction",
      correction,
      "--quiet",
    )
    == 0
  )
  d = RunSpec.read(out).details
  assert d["m"] == 60 and d["correction"] == correction
  recs = record.read_records(out)
  assert all(r["m"] == 60 and 0 <= r["k"] <= r["m_a"] <= 60 for r in recs.values())
  if correction == "authors_code":
    # The numbers recompute, but the code's bound is no certificate: verify says so.
    rep = verify.verify(out)
    assert not rep.ok and [m.idx for m in rep.mismatches] == [-1]
    assert "no proven certificate" in rep.mismatches[0].reason
    return
  res = check_method(out, tmp_path)
  # An edited check count (the mismatch stage) is caught too.
  j = int(np.flatnonzero(res.radius > 0)[0])
  f = copy_run(out, tmp_path / "k.tsv")
  edit_record(f, int(res.idx[j]), edit_check)
  assert_caught(f, int(res.idx[j]), "p_lower")


@pytest.mark.heavy
def test_deq_standard_verifies(deq_model, tmp_path):
  out = tmp_path / "std.tsv"
  assert (
    run_cli("certify", deq_model, out, "--method", "deq-standard", "--deq-steps", "5", *COMMON) == 0
  )
  check_method(out, tmp_path)


# ----------------------------------------------------------------------------- audit


@pytest.mark.heavy
def test_honest_runs_of_each_method_pass_their_audit(trained, deq_model, idrs_run, tmp_path):
  # The audit draws again each method's counts and its own record fields (IDRS's sigma(x),
  # slack and rate; SRS's check counts), so an honest run of each passes.
  from rsjax.app import audit

  ucan = tmp_path / "ucan.tsv"
  assert (
    run_cli(
      "certify",
      trained,
      ucan,
      "--method",
      "ucan",
      "--ucan-pattern",
      "linf",
      "--ucan-kappa",
      "0.5",
      "--sigma",
      "0.3",
      *COMMON,
    )
    == 0
  )
  srs = tmp_path / "srs.tsv"
  assert (
    run_cli(
      "certify",
      deq_model,
      srs,
      "--method",
      "srs",
      "--srs-m",
      "60",
      "--N",
      "300",
      "--N0",
      "30",
      "--batch",
      "100",
      "--skip",
      "60",
      "--quiet",
    )
    == 0
  )
  assert {"m_a", "k"} <= set(next(iter(record.read_records(srs).values())))
  # The chains change SRS's counts: they are part of the run (a resume with others is refused),
  # and the audit draws again with the run's.
  assert RunSpec.read(srs).details["chains"] == 100
  assert (
    run_cli(
      "certify",
      deq_model,
      srs,
      "--method",
      "srs",
      "--srs-m",
      "60",
      "--N",
      "300",
      "--N0",
      "30",
      "--batch",
      "50",
      "--skip",
      "60",
      "--quiet",
    )
    != 0
  )
  for out, model in ((idrs_run, trained), (ucan, trained), (srs, deq_model)):
    report = audit.audit(out, model_dir=model, rows=2)
    assert report.ok, (out.name, report.reason)
  # An SRS check count edited in the record (the radius left as it was) fails the audit's
  # re-draw as well as verify.
  res = io.read_certify(srs)
  idx = int(res.idx[int(np.flatnonzero(res.radius > 0)[0])])
  f = copy_run(srs, tmp_path / "k.tsv")
  edit_record(f, idx, edit_check)
  report = audit.audit(f, model_dir=deq_model, rows=5)
  assert not report.ok and report.reason.startswith("verify: NOT verified")
  assert any(c.name == "counts" and not c.ok for c in report.checks), report.checks


def test_ucan_scales_of_no_source_are_a_mismatch(trained, tmp_path):
  """Red team 8: a ``details.source`` neither pattern nor dataset skipped the scale check
  (sigma_min 1.0: ACR 0.272 -> 1.348 passed verify)."""
  out = tmp_path / "u.tsv"
  assert (
    run_cli("certify", trained, out, "--method", "ucan", "--ucan-sigma", "pattern", *COMMON) == 0
  )
  edit_run(out, lambda r: r["method"]["details"].update(source="x", sigma_min=1.0, sigma_gmean=1.0))
  rep = verify.verify(out)
  assert not rep.ok and "details.source 'x'" in str(rep.mismatches), rep.mismatches
