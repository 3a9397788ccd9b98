"""Forged certify runs, tried as a forger would: every file of a run editable, the auditor
keeps its own rsjax and is given the model. Each class of forgery is caught -- by
``verify`` alone where it needs no model (the digits dataset always loads), by the
audit of drawn rows where it does -- and the runs the forgeries start from pass.
"""

import dataclasses
import json
import subprocess
import sys
import types

import numpy as np
import pytest
from run_edits import (
  copy_run,
  drop_rows,
  edit_column,
  edit_record,
  edit_run,
  move_to_look,
  reradius,
)

from rsjax import claims, data, verify
from rsjax.app import audit, cli
from rsjax.records import io
from rsjax.records.spec import RunSpec
from rsjax.runs import record

N, N0 = 400, 40


def run_cli(*argv):
  return cli.main([str(a) for a in argv])


def certify(model, out, *more):
  assert (
    run_cli("certify", model, out, "--N", N, "--N0", N0, "--batch", "400", "--quiet", *more) == 0
  )
  return out


@pytest.fixture(scope="module")
def model(tmp_path_factory):
  d = tmp_path_factory.mktemp("forge") / "mlp"
  assert (
    run_cli(
      "train",
      "--dataset",
      "digits",
      "--model",
      "mlp",
      "--sigma",
      "0.5",
      "--epochs",
      "2",
      "--batch",
      "64",
      "--lr",
      "0.1",
      "--out",
      d,
      "--quiet",
    )
    == 0
  )
  return d


@pytest.fixture(scope="module")
def run40(model, tmp_path_factory):
  """A 40-row Gaussian run at sigma 0.5 (every 7th test digit up to 280)."""
  return certify(model, tmp_path_factory.mktemp("runs") / "r.tsv", "--skip", "7", "--max", "280")


def caught_by_audit(path, model, rows=1, seeds=(1, 2, 3)):
  """The audit fails with every seed when it draws only ``rows`` rows."""
  reports = [audit.audit(path, model_dir=model, rows=rows, seed=s) for s in seeds]
  return all(not r.ok for r in reports), reports[0].reason


def test_the_runs_forged_from_pass(model, run40):
  assert verify.verify(run40).ok
  a = audit.audit(run40, model_dir=model, rows="all")
  assert a.ok and len(a.rows) == 40, a.reason


# ----------------------------------------------------------------------------- 1. the record


def test_sigma_doubled_in_the_record_is_caught_by_any_drawn_row(model, run40, tmp_path):
  f = copy_run(run40, tmp_path / "f.tsv")
  before = io.read_certify(f).radius.sum()
  edit_run(f, lambda r: r["sigma"].update(value=1.0))
  reradius(f)
  assert io.read_certify(f).radius.sum() == pytest.approx(2 * before)
  assert verify.verify(f).ok  # consistent counts and radii: only the model can tell
  caught, reason = caught_by_audit(f, model)
  assert caught and reason.startswith("counts: 1 of 1 rows"), reason


def test_gaussian_run_relabelled_laplace_is_caught(model, run40, tmp_path):
  f = copy_run(run40, tmp_path / "f.tsv")
  edit_run(f, lambda r: r["sampling"].update(noise="laplace"))
  reradius(f)
  assert verify.verify(f).ok
  caught, reason = caught_by_audit(f, model)
  assert caught and reason.startswith("counts"), reason


def test_shrunk_input_shape_is_caught_by_verify(model, tmp_path):
  f = certify(model, tmp_path / "u.tsv", "--noise", "uniform_linf", "--max", "40", "--skip", "10")
  edit_run(f, lambda r: r["data"].update(input_shape=[2, 2, 1]))
  reradius(f)  # Linf radii x sqrt(dim)-ish larger
  rep = verify.verify(f)
  assert not rep.ok and "declares inputs of shape [2, 2, 1], digits has [8, 8, 1]" in str(
    rep.mismatches[0]
  )
  a = audit.audit(f, model_dir=model, rows=1, seed=0)
  assert not a.ok


def test_ddrs_run_relabelled_cohen_is_caught(model, tmp_path):
  f = certify(
    model,
    tmp_path / "d.tsv",
    "--method",
    "ddrs",
    "--ddrs-steps",
    "3",
    "--ddrs-lr",
    "0.05",
    "--max",
    "30",
    "--skip",
    "10",
  )
  assert verify.verify(f).ok

  def as_cohen(r):
    r["method"] = {"name": "cohen", "options": {"grid": None}, "multiclass": False}

  edit_run(f, as_cohen)
  lines = f.read_text().split("\n")  # drop the ddrs columns
  keep = [
    lines[0].split("\t").index(c) for c in ("idx", "label", "predict", "radius", "correct", "time")
  ]
  f.write_text("\n".join("\t".join(ln.split("\t")[k] for k in keep) if ln else ln for ln in lines))
  reradius(f)
  assert verify.verify(f).ok
  caught, reason = caught_by_audit(f, model)
  assert caught and reason.startswith("counts"), reason


def test_an_old_two_copy_record_is_refused_in_one_line(run40, tmp_path, capsys):
  f = copy_run(run40, tmp_path / "old.tsv")
  (tmp_path / "old.tsv.run.json").write_text(
    json.dumps(
      {"sigma": 0.5, "command": "certify", "certificate": {"format": "rsjax-certificate/1"}}
    )
  )
  with pytest.raises(verify.VerifyError, match="older rsjax"):
    verify.verify(f)
  assert run_cli("verify", f) == 2
  err = capsys.readouterr().err.strip()
  assert "\n" not in err and "certify the run again" in err


def test_a_run_rewritten_as_predict_is_not_verified(run40, tmp_path):
  f = copy_run(run40, tmp_path / "p.tsv")
  edit_run(f, lambda r: r.update(command="predict"))
  with pytest.raises(verify.VerifyError, match="only certify runs"):
    verify.verify(f)
  with pytest.raises(audit.AuditError, match="only certify runs"):
    audit.audit(f, model_dir="unused")


# ----------------------------------------------------------------------------- 2. drawn rows


def test_rows_outside_a_known_audit_are_caught_by_a_fresh_seed(model, run40, tmp_path):
  # The forger knows the rows a seed-0 audit draws and rewrites all the others' counts.
  f = copy_run(run40, tmp_path / "f.tsv")
  known = set(audit.audit(run40, model_dir=model, rows=20, seed=0).rows)
  res = io.read_certify(f)
  forged = [int(i) for i in res.idx if int(i) not in known]

  def all_top(r):
    top = max(r["counts0"], key=lambda k: r["counts0"][k])
    return {**r, "counts": {top: N}}

  for i in forged:
    edit_record(f, i, all_top)
  reradius(f)
  assert verify.verify(f).ok
  assert audit.audit(f, model_dir=model, rows=20, seed=0).ok  # the old default's blind spot
  a = audit.audit(f, model_dir=model, rows=20)  # a fresh seed, printed
  assert not a.ok and a.seed != 0 and "counts" in a.reason
  # Its power, stated: 20 forged rows of 40 escape 20 drawn rows with C(20,20)/C(40,20).
  assert audit.escape_probability(40, 20, 20) == pytest.approx(1 / 137846528820)
  assert audit.escape_probability(40, 20, 1) == pytest.approx(0.5)


def test_the_stated_escape_probability_matches_simulation():
  rng = np.random.default_rng(0)
  m, r, k = 30, 5, 4
  trials = 40_000
  escaped = sum(not (set(rng.choice(m, r, replace=False)) & set(range(k))) for _ in range(trials))
  p = audit.escape_probability(m, r, k)
  assert abs(escaped / trials - p) < 4 * np.sqrt(p * (1 - p) / trials)


def test_audit_prints_its_seed_and_repeats_with_it(model, run40, capsys):
  assert run_cli("audit", run40, "--model-dir", model, "--rows", "3") == 0
  out = capsys.readouterr().out
  seed = int(out.split("rows drawn (seed ")[1].split(")")[0])
  rows = out.split("): ")[1].split("\n")[0]
  assert run_cli("audit", run40, "--model-dir", model, "--rows", "3", "--seed", seed) == 0
  assert f"): {rows}" in capsys.readouterr().out
  assert "one forged row escapes with probability 0.925" in out


# ----------------------------------------------------------------------------- 3. labels


def test_a_relabelled_wrong_row_is_caught_by_verify(run40, tmp_path):
  f = copy_run(run40, tmp_path / "l.tsv")
  res = io.read_certify(f)
  wrong = np.flatnonzero((res.predict >= 0) & (res.correct == 0))
  j = int(wrong[0]) if len(wrong) else 0
  lines = f.read_text().split("\n")
  fields = lines[1 + j].split("\t")
  fields[1], fields[4] = fields[2], "1"  # label := predict, correct := 1
  lines[1 + j] = "\t".join(fields)
  f.write_text("\n".join(lines))
  rep = verify.verify(f)
  assert not rep.ok and any(
    m.idx == int(res.idx[j]) and "label" in m.reason for m in rep.mismatches
  )


# ----------------------------------------------------------------------------- 4. missing rows


def test_deleted_rows_leave_the_run_incomplete(run40, tmp_path, capsys):
  f = copy_run(run40, tmp_path / "m.tsv")
  res = io.read_certify(f)
  bad = {int(i) for i, c in zip(res.idx, res.correct, strict=True) if not c} or {int(res.idx[0])}
  drop_rows(f, lambda i: i not in bad)
  rep = verify.verify(f)
  assert not rep.ok and not rep.mismatches and rep.missing == len(bad)
  assert run_cli("verify", f) == 1
  assert f"incomplete: {40 - len(bad)} of 40 rows" in capsys.readouterr().out
  drop_rows(f, lambda i: False)  # no row at all
  rep = verify.verify(f)
  assert not rep.ok and rep.rows == 0 and "incomplete: 0 of 40" in rep.summary()


# ----------------------------------------------------------------------------- 5. indices


def test_duplicated_idx_is_refused(run40, tmp_path):
  f = copy_run(run40, tmp_path / "d.tsv")
  lines = f.read_text().split("\n")
  f.write_text("\n".join([*lines[:3], lines[2], *lines[3:]]))
  assert run_cli("verify", f) == 2


def test_swapped_idx_is_caught_by_verify(run40, tmp_path):
  f = copy_run(run40, tmp_path / "s.tsv")
  lines = f.read_text().split("\n")
  a, b = lines[1].split("\t"), lines[2].split("\t")
  a[0], b[0] = b[0], a[0]
  lines[1], lines[2] = "\t".join(a), "\t".join(b)
  f.write_text("\n".join(lines))
  ia, ib = int(a[0]), int(b[0])
  edit_record(f, ia, lambda r: {**r, "idx": -1})
  edit_record(f, ib, lambda r: {**r, "idx": ia})
  edit_record(f, -1, lambda r: {**r, "idx": ib})
  rep = verify.verify(f)
  assert not rep.ok and {m.idx for m in rep.mismatches} & {ia, ib}


def test_out_of_range_idx_fails_verify_and_the_audit(model, run40, tmp_path):
  f = copy_run(run40, tmp_path / "o.tsv")
  res = io.read_certify(f)
  last = int(res.idx[-1])
  lines = f.read_text().split("\n")
  fields = lines[len(res)].split("\t")
  fields[0] = "5000"
  lines[len(res)] = "\t".join(fields)
  f.write_text("\n".join(lines))
  edit_record(f, last, lambda r: {**r, "idx": 5000})
  rep = verify.verify(f)
  assert (
    any(
      m.idx == 5000 and "not one of the run's declared indices" in m.reason for m in rep.mismatches
    )
    and rep.missing == 1
  )
  a = audit.audit(f, model_dir=model, rows="all")
  assert not a.ok and a.reason.startswith("verify")


# ----------------------------------------------------------------------------- 6. the rest


def test_an_edited_p_lower_is_caught(run40, tmp_path):
  f = copy_run(run40, tmp_path / "p.tsv")
  i = int(io.read_certify(f).idx[3])
  edit_record(f, i, lambda r: {**r, "p_lower": min(1.0, r["p_lower"] + 1e-3)})
  rep = verify.verify(f)
  assert [m.idx for m in rep.mismatches] == [i] and "p_lower" in rep.mismatches[0].reason


def test_verify_never_imports_jax(run40):
  code = (
    "import sys; from rsjax import verify; r = verify.verify(sys.argv[1]); "
    "assert r.ok, r.summary(); assert 'jax' not in sys.modules, 'jax imported'; "
    "print('ok')"
  )
  out = subprocess.run(
    [sys.executable, "-c", code, str(run40)], capture_output=True, text=True, check=False
  )
  assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_verify_says_what_it_could_not_check(run40, tmp_path):
  f = copy_run(run40, tmp_path / "n.tsv")
  edit_run(f, lambda r: r["data"].update(name="cifar10"))
  rep = verify.verify(f, data_dir=str(tmp_path / "no-tfds"))
  assert rep.ok and rep.unchecked and "labels and inputs" in rep.unchecked[0]
  assert "not checked" in rep.summary()


# ----------------------------------------------------------------------------- 7. the claim


def _claim_record(base, claim):
  """The run record ``base`` (a dict) rewritten to state ``claim``."""
  r = json.loads(json.dumps(base))
  from rsjax.records import limits

  r["sampling"].update(
    noise=claim.noise, precision=claim.precision, pack=claim.pack, alpha=claim.alpha
  )
  r["sampling"]["compute_dtype"] = limits.COMPUTE_DTYPE_OF[claim.precision]  # as certify does
  r["method"]["name"] = claim.method
  r["method"]["multiclass"] = claim.multiclass
  grid = None if claim.budget_rule is None else [0.0, 0.25]
  r["method"]["options"] = {"grid": grid, "budget_rule": claim.budget_rule or "looks"}
  return r


def test_every_illegal_claim_is_refused_by_plan_and_verify_with_the_same_line(run40, tmp_path):
  """The one table (``rsjax.claims.refusal``) over every combination of method, noise,
  multiclass, budget rule, precision and packing: what ``Method.build`` refuses (certify's
  path), ``verify`` refuses with the same line, and it accepts every other claim."""
  import types

  from rsjax import claims, methods, noise
  from rsjax.engine import precision
  from rsjax.runs.method import Context

  assert claims.PRECISIONS == precision.PRECISIONS
  assert claims.NOISES == tuple(noise.NOISES)
  f = copy_run(run40, tmp_path / "c.tsv")
  base = json.loads((tmp_path / "c.tsv.run.json").read_text())
  refused = 0
  for claim in claims.every_claim(m.name for m in methods.METHODS):
    why = claims.refusal(claim, methods.get(claim.method))
    (tmp_path / "c.tsv.run.json").write_text(json.dumps(_claim_record(base, claim)))
    try:
      verify.verify(f)
      got = None
    except verify.VerifyError as e:
      got = str(e)
    if why is None:
      assert got is None or "refuse" not in got, (claim, got)
      continue
    refused += 1
    assert got is not None and got.endswith(": " + why), (claim, got)
    method = methods.get(claim.method)
    options = {"grid": (0.0, 0.25), "budget_rule": claim.budget_rule}
    if claim.budget_rule is not None and "grid" not in method.defaults():
      continue  # certify refuses --grid of another method before any plan (its option line)
    settings = types.SimpleNamespace(
      noise=noise.get_noise(claim.noise),
      precision=claim.precision,
      pack=claim.pack,
      alpha=claim.alpha,
    )
    ctx = Context(None, None, None, None, None, 0.5, settings, multiclass=claim.multiclass)
    with pytest.raises(ValueError) as e:
      method.build(ctx, **(options if claim.budget_rule is not None else {}))
    # The certifier names the noise by its registry name (uniform_l1 is uniform), as its record does.
    named = dataclasses.replace(claim, noise=record.noise_name(settings.noise))
    assert str(e.value) == claims.refusal(named, method), claim
  assert refused > 1000  # most combinations are not certificates


@pytest.mark.parametrize(
  "flags",
  [
    ("--noise", "uniform_linf", "--multiclass"),
    ("--noise", "laplace", "--multiclass"),
    ("--noise", "gaussian_8bit", "--multiclass"),
    ("--method", "idrs", "--noise", "laplace"),
    ("--method", "ddrs", "--multiclass"),
    ("--method", "ucan", "--noise", "gaussian_8bit"),
    ("--method", "idrs", "--grid", "0,0.25"),
    ("--grid", "0,0.25", "--multiclass"),
    ("--alpha", "0.9"),
  ],
)
def test_certify_refuses_with_the_tables_line(model, tmp_path, capsys, flags):
  from rsjax import claims, methods
  from rsjax.app.cli._args import flag_message
  from rsjax.app.launch.errors import RunError

  args = dict(zip(flags[::2], flags[1::2], strict=False))
  grid = "--grid" in flags
  claim = claims.Claim(
    method=args.get("--method", "cohen"),
    noise=args.get("--noise", "gaussian"),
    multiclass="--multiclass" in flags,
    budget_rule="looks" if grid else None,
    alpha=float(args.get("--alpha", 0.001)),
  )
  why = claims.refusal(claim, methods.get(claim.method))
  assert why is not None
  why = flag_message(RunError(why, "method"))  # the table's line, in the command's words
  if grid and claim.method != "cohen":  # the command refuses another method's option first
    why = f"--grid works with --method cohen, not {claim.method}"
  if "--alpha" in flags:  # its parser refuses it first (a usage error), with the table's bound
    with pytest.raises(SystemExit, match="2"):
      run_cli("certify", model, tmp_path / "x.tsv", "--quiet", *flags)
    assert f"--alpha: must be in (0, 0.5], got {args['--alpha']}" in capsys.readouterr().err
    return
  assert run_cli("certify", model, tmp_path / "x.tsv", "--N", "100", "--quiet", *flags) == 2
  assert why in capsys.readouterr().err


def test_a_linf_run_relabelled_multiclass_is_refused(model, tmp_path, capsys):
  for name in ("uniform_linf", "laplace"):
    f = certify(model, tmp_path / f"{name}.tsv", "--noise", name, "--max", "40", "--skip", "10")
    before = io.read_certify(f).radius.sum()
    edit_run(f, lambda r: r["method"].update(multiclass=True))
    reradius(f)  # the Gaussian multiclass radius, which does not hold for this noise
    assert io.read_certify(f).radius.sum() > before
    with pytest.raises(verify.VerifyError, match="multiclass.*Gaussian noise only"):
      verify.verify(f)
    assert run_cli("verify", f) == 2
    assert f"not noise={name}" in capsys.readouterr().err  # the record's field


def test_alpha_outside_the_legal_range_is_refused(run40, tmp_path):
  f = copy_run(run40, tmp_path / "a.tsv")
  edit_run(f, lambda r: r["sampling"].update(alpha=0.9999999))
  reradius(f)
  with pytest.raises(verify.VerifyError, match=r"alpha must lie in \(0, 0.5\]"):
    verify.verify(f)


def test_the_samples_column_is_verified(model, tmp_path):
  b = certify(
    model, tmp_path / "b.tsv", "--grid", "0,0.25,0.5", "--N", "2000", "--max", "20", "--skip", "10"
  )
  assert verify.verify(b).ok
  _scale_columns(b, 0.1, ("samples",))
  rep = verify.verify(b)
  assert not rep.ok and "samples" in rep.mismatches[0].reason, rep.summary()
  assert not audit.audit(b, model_dir=model, rows="all").ok


@pytest.fixture(scope="module")
def budgeted_runs(model, tmp_path_factory):
  """An honest budgeted run of each rule: 20 rows at N 2000 (every 5th test digit up to 100)."""
  d = tmp_path_factory.mktemp("budgeted")
  return {
    rule: certify(model, d / f"{rule}.tsv", "--grid", "0,0.25,0.5", "--budget-rule", rule,
                  "--N", "2000", "--max", "100", "--skip", "5")
    for rule in ("looks", "anytime")
  }  # fmt: skip


def _looks(path):
  b = RunSpec.read(path).details["budget"]
  return claims.budget_looks(2000, b["first"], b["ratio"])  # both rules' looks


@pytest.mark.parametrize("rule", ["looks", "anytime"])
def test_a_row_moved_to_an_earlier_look_is_caught_by_its_stopping_rule(
  budgeted_runs, rule, tmp_path
):
  src = budgeted_runs[rule]
  assert verify.verify(src).ok  # its rows that stopped before N meet the rule where they did
  assert any(r["n"] < 2000 for r in record.read_records(src).values())
  # The forger claims half the samples: each row moved to the last look at or below half its
  # own, its counts scaled to sum to it, its bound, radius and samples recomputed under the
  # rule. Every count, look, alpha and radius is consistent; the stop is not the rule's.
  f = copy_run(src, tmp_path / "f.tsv")
  moved = {}
  for idx, r in record.read_records(f).items():
    earlier = [n for n in _looks(f) if n <= r["n"] // 2]
    if earlier:
      moved[idx] = earlier[-1]
      edit_record(f, idx, lambda r, n=earlier[-1]: move_to_look(r, n))
  reradius(f)
  rep = verify.verify(f)
  assert not rep.ok, rep.summary()
  assert {m.idx for m in rep.mismatches} <= set(moved)
  for m in rep.mismatches:
    assert f"stopped at {moved[m.idx]:,} samples" in m.reason, m.reason
    assert "do not meet the stopping rule" in m.reason, m.reason


def test_the_stopping_check_is_the_engines_at_every_count_of_every_look(budgeted_runs):
  """verify's decision, from the record, equals the engine's at every count of every look
  before N: the same grid levels, alphas, thresholds and stop_alpha as the run's rule."""
  from rsjax.engine import anytime, budget
  from rsjax.verify._run import certificate_view

  for rule, path in budgeted_runs.items():
    run = RunSpec.read(path)
    cert, n, alpha = certificate_view(run), 2000, run.sampling.alpha
    looks, dim = _looks(path), int(np.prod(run.data.input_shape))
    grid = tuple(run.options["grid"])
    # One row per count s = 0..n_k at each look n_k before N.
    s = np.concatenate([np.arange(k + 1) for k in looks[:-1]])
    m, zero = len(s), np.zeros(len(s), np.int64)
    rows = claims.Rows(
      valid=np.ones(m, bool), guess=zero, n_a=s, runner_up=zero,
      n=np.concatenate([np.full(k + 1, k) for k in looks[:-1]]),
      alpha=np.full(m, alpha), p_recorded=np.full(m, np.nan),
    )  # fmt: skip
    res = types.SimpleNamespace(idx=np.arange(m))
    if rule == "anytime":
      table = anytime.anytime_decisions(anytime.Anytime(grid=grid), n_max=n, alpha=alpha,
                                        scales=run.sigma, dim=dim)  # fmt: skip
      goes_on = ~np.concatenate([table.decide(np.arange(k + 1), i)[2] for i, k in
                                 enumerate(looks[:-1])])  # fmt: skip
      found = claims.anytime_stop_issues(cert, res, rows, run.sigma)
    else:
      levels = claims.budget_levels(cert, n, alpha, [])
      assert len(looks) == 2  # N 2000: one look (1000) before N, where s is the count

      def count_fn(active, start, stop, s=s):  # the count s at the first look, then nothing
        return s[active] if start == 0 else np.zeros(len(active), np.int64)

      _, used, _ = budget.sequential_bounds(count_fn, len(s), n_max=n, alpha=alpha,
                                            budget=budget.Budget(grid=grid), scale=run.sigma,
                                            dim=dim)  # fmt: skip
      goes_on = used > looks[0]
      found = claims.looks_stop_issues(cert, res, rows, levels, run.sigma)
    assert goes_on.any() and not goes_on.all(), rule
    assert sorted(m.idx for m in found) == np.flatnonzero(goes_on).tolist(), rule


def test_the_counts_column_is_verified(model, tmp_path):
  f = certify(model, tmp_path / "c.tsv", "--save-counts", "--max", "30", "--skip", "10")
  assert verify.verify(f).ok

  def move(text):
    c = [int(v) for v in text.split(",")]
    top = max(range(len(c)), key=c.__getitem__)
    c[top] -= 5
    c[(top + 1) % len(c)] += 5
    return ",".join(map(str, c))

  edit_column(f, 0, "counts", move)
  rep = verify.verify(f)
  assert not rep.ok and "counts" in rep.mismatches[0].reason


def test_time_and_foreign_columns_are_unverified_and_analyze_skips_them(run40, tmp_path, capsys):
  f = copy_run(run40, tmp_path / "t.tsv")
  lines = f.read_text().split("\n")
  lines = [ln + ("\talm" if j == 0 else "\t3.0") if ln else ln for j, ln in enumerate(lines)]
  f.write_text("\n".join(lines))
  rep = verify.verify(f)
  assert rep.ok and rep.unverified == ("time", "alm")
  assert "columns not verified" in rep.summary() and "alm" in rep.summary()
  assert run_cli("analyze", f, "--radius-column", "alm") == 2
  assert "not a radius column" in capsys.readouterr().err
  # issue 68: --radius-column reads only the radius columns the run's method declares
  assert run_cli("analyze", f, "--radius-column", "alm", "--unverified") == 2
  assert "not a radius column of method 'cohen'" in capsys.readouterr().err
  assert run_cli("analyze", f, "--unverified") == 0
  assert "alm (unverified)" in capsys.readouterr().out
  assert run_cli("analyze", f) == 0
  assert "alm" not in capsys.readouterr().out


def test_verify_states_the_claim_it_verified(run40):
  s = verify.verify(run40).summary()
  assert (
    "method cohen, gaussian (l2) noise, sigma 0.5, N0 40, N 400, alpha 0.001, binary radius, "
    "40 rows" in s
  ), s


def test_ucan_dataset_scales_are_bound_by_their_file(model, tmp_path):
  import shutil

  from rsjax import ucan

  wd = tmp_path / "wd"
  shutil.copytree(model, wd)
  sigma = np.random.default_rng(0).uniform(0.3, 0.6, (8, 8, 1)).astype(np.float32)
  ucan.save_universal_noise(wd, mu=np.zeros_like(sigma), sigma=sigma)
  out = tmp_path / "runs"
  out.mkdir()
  f = certify(wd, out / "u.tsv", "--method", "ucan", "--max", "30", "--skip", "10")
  rep = verify.verify(f)
  assert rep.ok and any("no ucan_noise.npz beside the run" in u for u in rep.unchecked)
  shutil.copy(wd / "ucan_noise.npz", out / "ucan_noise.npz")
  rep = verify.verify(f)
  assert rep.ok and not rep.unchecked, rep.unchecked

  def doubled(r):
    d = r["method"]["details"]
    d.update(sigma_min=2 * d["sigma_min"], sigma_gmean=2 * d["sigma_gmean"])

  g = copy_run(f, out / "g.tsv")
  edit_run(g, doubled)
  _scale_columns(g, 2.0, ("radius", "alm"))
  rep = verify.verify(g)
  assert not rep.ok and "not those of ucan_noise.npz" in rep.mismatches[0].reason
  # Without the file beside it, verify says it could not check the scales; the audit, with
  # a model that has no scales file, fails (exit 1) rather than refusing to run.
  h = copy_run(g, tmp_path / "h.tsv")
  rep = verify.verify(h)
  assert rep.ok and any("dataset-wise scales" in u for u in rep.unchecked)
  edit_run(h, lambda r: r["method"]["options"].update(ucan_sigma="dataset"))
  a = audit.audit(h, model_dir=model, rows=1)
  assert not a.ok and a.reason.startswith("method: the run cannot be rebuilt"), a.reason
  assert run_cli("audit", h, "--model-dir", model, "--rows", "1") == 1


@pytest.mark.parametrize("edit", ["alpha", "multiclass", "range"])
def test_a_claim_edited_after_the_draw_makes_every_audited_row_differ(model, run40, tmp_path, edit):
  f = copy_run(run40, tmp_path / "e.tsv")
  if edit == "alpha":
    edit_run(f, lambda r: r["sampling"].update(alpha=0.2))
  elif edit == "multiclass":
    edit_run(f, lambda r: r["method"].update(multiclass=True))
  else:  # the declared range narrowed (to the rows that did well, say)
    edit_run(f, lambda r: r["data"].update(start=70))
    drop_rows(f, lambda i: i >= 70)
  reradius(f)
  rep = verify.verify(f)
  assert rep.ok, rep.summary()
  a = audit.audit(f, model_dir=model, rows="all")
  k = len(io.read_certify(f))
  assert not a.ok and f"{k} of {len(a.rows)} rows drawn again give other counts" in a.reason, (
    a.reason
  )


def test_a_stated_claim_digest_left_stale_is_a_mismatch(run40, tmp_path):
  f = copy_run(run40, tmp_path / "s.tsv")
  edit_run(f, lambda r: r["sampling"].update(alpha=0.01), restate_claim=False)
  reradius(f)
  rep = verify.verify(f)
  assert not rep.ok and "claim digest" in rep.mismatches[0].reason


def test_an_unbound_record_still_verifies_and_says_so(run40, tmp_path):
  from rsjax.records import spec as runspec

  f = copy_run(run40, tmp_path / "u.tsv")

  def unbound(r):
    r["format"] = runspec.UNBOUND_FORMAT
    r["key"]["derivation"] = runspec.UNBOUND_KEY_DERIVATION
    r["key"].pop("claim")

  edit_run(f, unbound, restate_claim=False)
  rep = verify.verify(f, accept_unbound=True)
  assert rep.ok and "not checked: that the claim was fixed before the noise was drawn" in (
    rep.summary()
  )


def test_a_bound_run_downgraded_to_an_unbound_record_is_not_verified(model, run40, tmp_path):
  """Found by the red team: a /3 record rewritten as /2 with its claim digest moved into
  key.fold_in draws the same noise, so its alpha could be raised after the draw. Unbound
  records are refused unless accepted knowingly, and fail the audit."""
  from rsjax.records import spec as runspec

  f = copy_run(run40, tmp_path / "d.tsv")

  def downgrade(r):
    r["format"] = runspec.UNBOUND_FORMAT
    r["key"]["derivation"] = runspec.UNBOUND_KEY_DERIVATION
    digest = bytes.fromhex(r["key"].pop("claim"))  # its 8 words, as the key folds them
    r["key"]["fold_in"] += [int.from_bytes(digest[i : i + 4], "big") for i in range(0, 32, 4)]
    r["sampling"]["alpha"] = 0.5

  edit_run(f, downgrade, restate_claim=False)
  reradius(f)
  rep = verify.verify(f)
  assert not rep.ok and "does not bind its claim" in rep.mismatches[0].reason
  assert run_cli("verify", f) == 1
  assert not audit.audit(f, model_dir=model, rows=1).ok
  assert verify.verify(f, accept_unbound=True).ok  # knowingly: the report says not bound


def test_an_anytime_record_without_its_thresholds_digest_is_a_mismatch(model, tmp_path):
  f = certify(
    model,
    tmp_path / "a.tsv",
    "--grid",
    "0,0.25,0.5",
    "--budget-rule",
    "anytime",
    "--N",
    "2000",
    "--max",
    "20",
    "--skip",
    "10",
  )
  assert verify.verify(f).ok
  edit_run(f, lambda r: r["method"]["details"]["budget"].pop("thresholds") and None)
  rep = verify.verify(f)
  assert not rep.ok and "thresholds digest" in rep.mismatches[0].reason


# ----------------------------------------------------------------------------- found by red-teaming


def _scale_columns(path, factor, columns):
  lines = path.read_text().split("\n")
  head = lines[0].split("\t")
  for j in range(1, len(lines)):
    if lines[j]:
      fields = lines[j].split("\t")
      for c in columns:
        fields[head.index(c)] = repr(float(fields[head.index(c)]) * factor)
      lines[j] = "\t".join(fields)
  path.write_text("\n".join(lines))


def test_ucan_scales_rewritten_are_caught(model, tmp_path):
  src = certify(
    model,
    tmp_path / "u.tsv",
    "--method",
    "ucan",
    "--ucan-sigma",
    "pattern",
    "--max",
    "30",
    "--skip",
    "10",
  )
  assert verify.verify(src).ok
  # The pattern's sigma raised with its scales: verify derives the pattern from the run.
  f = copy_run(src, tmp_path / "p.tsv")

  def raise_pattern(r):
    d = r["method"]["details"]
    d.update(sigma=3 * d["sigma"], sigma_min=3 * d["sigma_min"], sigma_gmean=3 * d["sigma_gmean"])

  edit_run(f, raise_pattern)
  _scale_columns(f, 3.0, ("radius", "alm"))
  rep = verify.verify(f)
  assert not rep.ok and "is not the run's" in rep.mismatches[0].reason
  # Claimed dataset-wise with scales x3 under --ucan-sigma pattern: not the options' source.
  g = copy_run(src, tmp_path / "d.tsv")

  def as_dataset(r):
    d = r["method"]["details"]
    d.update(source="dataset", sigma_min=3 * d["sigma_min"], sigma_gmean=3 * d["sigma_gmean"])

  edit_run(g, as_dataset)
  _scale_columns(g, 3.0, ("radius", "alm"))
  rep = verify.verify(g)
  assert not rep.ok and "is not what --ucan-sigma pattern gives" in str(rep.mismatches)
  # ... and with the options saying auto (either source): verify cannot rebuild a dataset's
  # noise without its file, the audit does.
  edit_run(g, lambda r: r["method"]["options"].update(ucan_sigma="auto"))
  assert verify.verify(g).ok
  a = audit.audit(g, model_dir=model, rows=1)
  assert not a.ok and a.reason.startswith("method: the run records details"), a.reason


def test_a_budget_schedule_rewritten_is_caught(model, tmp_path):
  b = certify(
    model, tmp_path / "b.tsv", "--grid", "0,0.25,0.5", "--N", "2000", "--max", "20", "--skip", "10"
  )
  edit_run(b, lambda r: r["method"]["details"]["budget"].update(final_share=0.02))
  reradius_budgeted = verify.verify(b)
  assert not reradius_budgeted.ok  # the bounds moved with the schedule
  # Even with consistent bounds, the schedule is not the one the run's settings give.
  a = audit.audit(b, model_dir=model, rows=1)
  assert not a.ok and a.reason.startswith(("verify", "method"))
  edit_run(b, lambda r: r["method"]["details"]["budget"].update(final_share=-200))
  rep = verify.verify(b)
  assert not rep.ok and "budgeted schedule" in rep.mismatches[0].reason


def test_a_repeated_column_is_refused(run40, tmp_path):
  f = copy_run(run40, tmp_path / "c.tsv")
  lines = f.read_text().split("\n")
  std = 6
  best = lines[1].split("\t")[:std]
  out = ["\t".join(lines[0].split("\t")[:std] * 2)]
  out += ["\t".join(best + ln.split("\t")[:std]) for ln in lines[1:] if ln]
  f.write_text("\n".join(out) + "\n")
  assert run_cli("verify", f) == 2


def test_a_dataset_name_blanked_or_unknown_is_not_verified_by_the_audit(model, run40, tmp_path):
  f = copy_run(run40, tmp_path / "n.tsv")
  edit_run(f, lambda r: r["data"].update(name=""))
  with pytest.raises(verify.VerifyError, match="impossible data range"):
    verify.verify(f)
  g = copy_run(run40, tmp_path / "u.tsv")
  res = io.read_certify(g)
  j = int(np.flatnonzero(res.correct == 0)[0]) if (res.correct == 0).any() else 0
  lines = g.read_text().split("\n")
  fields = lines[1 + j].split("\t")
  fields[1], fields[4] = fields[2], "1"
  lines[1 + j] = "\t".join(fields)
  g.write_text("\n".join(lines))
  edit_run(g, lambda r: r["data"].update(name="my-digits"))
  assert verify.verify(g).unchecked  # verify cannot load it, and says so
  with pytest.raises(audit.AuditError, match="my-digits"):
    audit.audit(g, model_dir=model, rows=1)  # the audit never swaps in another dataset
  # The true name back: the audit checks every label, drawn or not.
  edit_run(g, lambda r: r["data"].update(name="digits"))
  a = audit.audit(g, model_dir=model, rows=1, seed=0)
  assert not a.ok


def test_ddrs_rows_reordered_are_caught(model, tmp_path):
  f = certify(
    model,
    tmp_path / "d.tsv",
    "--method",
    "ddrs",
    "--ddrs-steps",
    "2",
    "--max",
    "30",
    "--skip",
    "10",
  )
  lines = f.read_text().split("\n")
  body = [ln for ln in lines[1:] if ln]
  f.write_text("\n".join([lines[0], *reversed(body)]) + "\n")
  rep = verify.verify(f)
  assert not rep.ok and any("run's order" in m.reason for m in rep.mismatches)


# ----------------------------------------------------------------------------- strict, bounded parsing
# Issue 51 item 5: every integer read from text is ASCII digits, every integer of a record a JSON
# integer, every size bounded before anything is built, and every refusal one line naming the
# file and the row or field -- never a raw OverflowError, MemoryError or "invalid literal".

_RAW = ("Traceback", "OverflowError", "MemoryError", "invalid literal", "KeyError", "TypeError")


def _tsv_edit(j, column, text):
  def edit(path):
    from run_edits import edit_column

    edit_column(path, j, column, lambda _: text)

  return edit


def _run_edit(section, field, value):
  def edit(path):
    def fn(r):
      (r[section] if section else r)[field] = value

    edit_run(path, fn)

  return edit


def _rec_edit(idx, fn):
  return lambda path: edit_record(path, idx, fn)


def _top(key=None, value=None):
  """Row 14's estimation count of its top class, under another ``key(top)`` or ``value``."""

  def fn(r):
    top = max(r["counts"], key=lambda k: r["counts"][k])
    count = r["counts"].pop(top)
    r["counts"][key(top) if key else top] = count if value is None else value
    return r

  return fn


def _arabic(digits):
  return "".join(chr(0x660 + int(c)) for c in digits)


# (id, edit, what the message must name). Row 2 of run40 is idx 14, on line 4 of the file.
MALFORMED = [
  ("idx-underscore", _tsv_edit(2, "idx", "1_4"), "line 4: idx"),
  ("idx-fullwidth", _tsv_edit(2, "idx", "\uff11\uff14"), "line 4: idx"),
  ("idx-arabic-indic", _tsv_edit(2, "idx", "\u0661\u0664"), "line 4: idx"),
  ("idx-plus", _tsv_edit(2, "idx", "+14"), "line 4: idx"),
  ("idx-leading-zero", _tsv_edit(2, "idx", "014"), "line 4: idx"),
  ("idx-huge", _tsv_edit(2, "idx", "9" * 30), "line 4: idx"),
  ("idx-5000-digits", _tsv_edit(2, "idx", "1" * 5000), "line 4: idx"),
  ("label-arabic-indic", _tsv_edit(2, "label", "\u0664"), "line 4: label"),
  ("predict-fullwidth", _tsv_edit(2, "predict", "\uff14"), "line 4: predict"),
  ("predict-huge", _tsv_edit(2, "predict", str(10**30)), "line 4: predict"),
  ("radius-1e999", _tsv_edit(2, "radius", "1e999"), "line 4: radius"),
  ("radius-arabic", _tsv_edit(2, "radius", "\u0660.\u0665"), "line 4: radius"),
  ("radius-underscore", _tsv_edit(2, "radius", "0.3_1"), "line 4: radius"),
  ("time-inf", _tsv_edit(2, "time", "inf"), "line 4: time"),
  ("time-nan", _tsv_edit(2, "time", "nan"), "line 4: time"),
  ("time-1e999", _tsv_edit(2, "time", "1e999"), "line 4: time"),
  ("time-arabic", _tsv_edit(2, "time", "\u0660:\u0660\u0660:\u0660\u0661"), "line 4: time"),
  ("n-float", _run_edit("sampling", "n", 400.5), "sampling.n"),
  ("n-float-integral", _run_edit("sampling", "n", 400.0), "sampling.n"),
  ("n-string", _run_edit("sampling", "n", "400"), "sampling.n"),
  ("n-bool", _run_edit("sampling", "n", True), "sampling.n"),
  ("n-infinity", _run_edit("sampling", "n", float("inf")), "sampling.n"),
  ("n-huge", _run_edit("sampling", "n", 10**30), "sampling.n"),
  ("n0-float", _run_edit("sampling", "n0", 40.0), "sampling.n0"),
  ("alpha-string", _run_edit("sampling", "alpha", "0.001"), "sampling.alpha"),
  ("alpha-bool", _run_edit("sampling", "alpha", True), "sampling.alpha"),
  ("alpha-nan", _run_edit("sampling", "alpha", float("nan")), "sampling.alpha"),
  ("sigma-string", _run_edit("sigma", "value", "0.5"), "sigma.value"),
  ("sigma-bool", _run_edit("sigma", "value", True), "sigma.value"),
  ("sigma-infinity", _run_edit("sigma", "value", float("inf")), "sigma.value"),
  ("size-float", _run_edit("data", "size", 300.0), "data.size"),
  ("size-10^400", _run_edit("data", "size", 10**400), "data.size"),
  ("skip-string", _run_edit("data", "skip", "7"), "data.skip"),
  ("stop-float", _run_edit("data", "stop", 280.5), "data.stop"),
  ("classes-float", _run_edit("data", "num_classes", 10.0), "data.num_classes"),
  ("classes-2^40", _run_edit("data", "num_classes", 2**40), "data.num_classes"),
  ("shape-float", _run_edit("data", "input_shape", [8, 8, 1.0]), "data.input_shape"),
  ("shape-huge", _run_edit("data", "input_shape", [2**40, 2**40, 1]), "data.input_shape"),
  ("seed-float", _run_edit("key", "seed", 0.5), "key.seed"),
  ("fold-in-float", _run_edit("key", "fold_in", [1.5]), "key.fold_in"),
  ("rec-idx-negative", _rec_edit(14, lambda r: {**r, "idx": -14}), "idx"),
  ("rec-idx-huge", _rec_edit(14, lambda r: {**r, "idx": 10**20}), "idx"),
  ("rec-idx-string", _rec_edit(14, lambda r: {**r, "idx": "14"}), "idx"),
  ("counts-key-arabic", _rec_edit(14, _top(key=_arabic)), "14"),
  ("counts-key-leading-zero", _rec_edit(14, _top(key=lambda k: "0" + k)), "14"),
  ("counts-huge", _rec_edit(14, _top(value=10**30)), "14"),
  ("counts-float", _rec_edit(14, _top(value=400.0)), "14"),
  ("n-used-huge", _rec_edit(14, lambda r: {**r, "n": 10**30}), "14"),
]


@pytest.mark.parametrize("edit,names", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_fields_are_refused_in_one_line_naming_them(run40, tmp_path, capsys, edit, names):
  f = copy_run(run40, tmp_path / "f.tsv")
  edit(f)
  rc = run_cli("verify", f)
  out, err = capsys.readouterr()
  assert rc in (1, 2), (rc, out, err)
  assert not any(raw in out + err for raw in _RAW), out + err
  if rc == 2:  # refused: one line, naming the file and the field
    assert err.count("\n") == 1 and err.startswith("rsjax verify: error: "), err
    assert "f.tsv" in err and names in err, err
  else:  # a row that does not match: named
    assert names in out, out


@pytest.mark.parametrize("text", ["1_4", "\uff11\uff14", "\u0661\u0664", "+14", "014"])
def test_an_idx_in_other_digits_is_refused(run40, tmp_path, text):
  # int() reads each of these as 14; the file must say 14.
  f = copy_run(run40, tmp_path / "f.tsv")
  _tsv_edit(2, "idx", text)(f)
  with pytest.raises(ValueError, match=r"line 4: idx must be .*ASCII"):
    verify.verify(f)


@pytest.mark.parametrize("value", [400.5, 400.0, "400", True])
def test_a_sample_count_that_is_no_json_integer_is_refused(run40, tmp_path, value):
  f = copy_run(run40, tmp_path / "f.tsv")
  _run_edit("sampling", "n", value)(f)
  with pytest.raises(verify.VerifyError, match=r"sampling\.n must be a JSON integer"):
    verify.verify(f)


def test_counts_under_a_class_in_other_digits_are_not_counted(run40, tmp_path):
  f = copy_run(run40, tmp_path / "f.tsv")
  edit_record(f, 14, _top(key=_arabic))  # the top class in Arabic-Indic digits
  rep = verify.verify(f)
  assert not rep.ok and [m.idx for m in rep.mismatches] == [14], rep.mismatches


def test_a_record_idx_beyond_any_dataset_is_refused(run40, tmp_path):
  f = copy_run(run40, tmp_path / "f.tsv")
  edit_record(f, 14, lambda r: {**r, "idx": 10**20})
  with pytest.raises(ValueError, match=r"cert\.jsonl.* line 3: idx"):
    verify.verify(f)


def test_time_must_be_finite(run40, tmp_path):
  f = copy_run(run40, tmp_path / "f.tsv")
  _tsv_edit(2, "time", "inf")(f)
  with pytest.raises(ValueError, match="line 4: time must be"):
    io.read_certify(f)


def test_a_claim_of_ten_billion_rows_fails_fast_naming_the_bound(run40, tmp_path):
  import time
  import tracemalloc

  from rsjax.records import limits

  f = copy_run(run40, tmp_path / "f.tsv")
  edit_run(f, lambda r: r["data"].update(size=10**10, stop=-1))
  tracemalloc.start()
  t0 = time.perf_counter()
  try:
    with pytest.raises(verify.VerifyError, match=rf"data\.size .*{limits.MAX_SIZE}"):
      verify.verify(f)
    peak = tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()
  print(f"refused in {time.perf_counter() - t0:.4f} s, peak {peak} bytes")
  assert peak < 1 << 20
  # Within the size bound, more declared rows than any run certifies.
  edit_run(f, lambda r: r["data"].update(size=limits.MAX_SIZE, stop=-1, skip=1))
  with pytest.raises(verify.VerifyError, match=rf"declares .* rows .*{limits.MAX_ROWS}"):
    verify.verify(f)


def test_a_large_declared_range_is_counted_not_built(run40, tmp_path):
  import tracemalloc

  from rsjax.records import limits

  f = copy_run(run40, tmp_path / "f.tsv")
  edit_run(f, lambda r: r["data"].update(size=limits.MAX_ROWS, stop=-1, skip=1))
  tracemalloc.start()
  try:
    rep = verify.verify(f)
    peak = tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()
  assert not rep.ok and rep.missing == limits.MAX_ROWS - 40
  assert peak < 64 << 20, peak  # a set of 2^24 ints is over 500 MB


def test_audit_and_analyze_name_a_malformed_field_in_one_line(model, run40, tmp_path, capsys):
  f = copy_run(run40, tmp_path / "f.tsv")
  _run_edit("sampling", "n", 400.5)(f)
  assert run_cli("audit", f, "--model-dir", model) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "sampling.n must be a JSON integer" in err, err
  assert run_cli("analyze", f) == 0  # the table, without the run's summary, and why
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and err.startswith("rsjax analyze: warning: "), err
  assert "sampling.n must be a JSON integer" in err, err
  g = copy_run(run40, tmp_path / "g.tsv")
  _tsv_edit(2, "idx", "\u0661\u0664")(g)
  for argv in (("audit", g, "--model-dir", model), ("analyze", g)):
    assert run_cli(*argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "line 4: idx must be" in err, err


def test_budget_looks_never_take_the_ceiling_of_infinity():
  from rsjax import claims

  # A forged ratio of 1e308: n * ratio overflows to inf, whose ceiling raised OverflowError.
  assert claims.budget_looks(400, 100, 1e308) == [100, 400]
  assert claims.anytime_looks(400, 100, 1e308) == [100, 400]


# ----------------------------------------------------------------------------- the second red team
# A forger who edits the claim after the draw searched a nonce (an extra sampling entry) until
# the claim's digest, then 32 bits, equalled an honest run's: verify and the audit of every row
# passed with alpha 0.05, the multiclass radius and a range narrowed to the correct rows.


def test_the_whole_claim_digest_is_folded_into_the_key(run40):
  run = verify.read_run(str(run40))
  digest = run.claim_digest()
  words = run.key_path()[len(run.key_fold_in) :]
  assert len(digest) == 64 and len(words) == 8  # 256 bits, not the first 32
  assert b"".join(w.to_bytes(4, "big") for w in words) == bytes.fromhex(digest)
  assert run.stated_claim == digest


@pytest.mark.parametrize(
  "edit, why",
  [
    (lambda r: r["sampling"].update(run_tag="g5MqhI"), "sampling.run_tag is not a sampling"),
    (lambda r: r["sampling"].update(pack=2.0), "sampling.pack must be one of"),
    (lambda r: r["sampling"].update(compute_dtype="int7"), "sampling.compute_dtype must be"),
    # red team 5: dtypes certify never writes, or not the precision's
    (lambda r: r["sampling"].update(compute_dtype="float16"), "sampling.compute_dtype must be"),
    (
      lambda r: r["sampling"].update(compute_dtype="bfloat16", precision="float32"),
      "is not what precision 'float32' runs in",
    ),
    (lambda r: r["model"].update(denoiser_config="0" * 64), "model.denoiser_config is set, but"),
    (lambda r: r["key"].update(seed=2**63), "key.seed"),
    (lambda r: r["model"].update(torch_arch="resnet18"), "model.torch_arch is set, but"),
    (lambda r: r["model"].update(resize="abc"), "model.resize must be 'HxW'"),
    (lambda r: r["model"].update(note="x"), "model.note is not a model field"),
    (lambda r: r["method"]["options"].update(tag="x"), "method.options.tag is not an option"),
    (lambda r: r["method"]["options"].update(grid="abc"), "method.options.grid 'abc' is not"),
    (lambda r: r["method"]["options"].update(budget_rule="best"), "budget_rule 'best' is not"),
  ],
)
def test_a_record_certify_would_never_write_is_refused(run40, tmp_path, edit, why):
  """Entries that mean nothing (a nonce), values certify cannot give, fields that do not
  apply: refused by verify in one line, as the audit would fail to rebuild them."""
  f = copy_run(run40, tmp_path / "n.tsv")
  edit_run(f, edit)
  with pytest.raises(verify.VerifyError, match=why):
    verify.verify(f)
  assert run_cli("verify", f) == 2


def test_the_record_strictness_tables_match_what_they_describe():
  """``limits.SAMPLING_KEYS`` and ``MODEL_FIELDS`` are what certify records (JAX-free copies)."""
  import rsjax
  from rsjax.records import limits
  from rsjax.records import spec as runspec

  recorded = set(record.run_sampling(rsjax.Sampling(), pack=2).to_json())
  assert limits.SAMPLING_KEYS == recorded
  assert limits.MODEL_FIELDS == {f.name for f in dataclasses.fields(runspec.ModelRef)}


def test_the_compute_dtypes_are_the_precisions():
  """``limits.COMPUTE_DTYPE_OF`` (JAX-free) is what ``rsjax.engine.precision`` runs in."""
  import numpy as np

  from rsjax.engine import precision
  from rsjax.records import limits

  ran = {
    p: None if precision.compute_dtype(p) is None else np.dtype(precision.compute_dtype(p)).name
    for p in precision.PRECISIONS
  }
  assert limits.COMPUTE_DTYPE_OF == ran


def test_a_run_that_does_not_fit_its_model_fails_the_audit(model, run40, tmp_path):
  """Red team 5: a record verify accepts (a resize to 16x16 of the 8x8 model's digits) made
  the audit stop with exit 2 (cannot audit) instead of failing it (exit 1)."""
  f = copy_run(run40, tmp_path / "r.tsv")
  edit_run(f, lambda r: r["model"].update(resize="16x16"))
  assert verify.verify(f).ok  # the shape of the field is all verify can see
  rep = audit.audit(f, model_dir=model, rows=2, seed=0)
  assert not rep.ok and "after --resize" in rep.reason, rep.reason
  assert run_cli("audit", f, "--model-dir", model, "--rows", "2") == 1


@pytest.mark.parametrize(
  "edit, why",
  [
    (lambda r: r["sampling"].update(pack=2), "cannot pack"),  # an MLP has no stage to pack
    (lambda r: r["data"].update(split="validation"), "the split 'validation' of digits"),
  ],
)
def test_a_record_its_model_or_dataset_cannot_build_fails_the_audit(
  model, run40, tmp_path, edit, why
):
  """Red team 6: a packing the model does not have, or a split the embedded dataset does not
  have, with perfect counts: verify passed and audit stopped with exit 2, not 1."""
  f = copy_run(run40, tmp_path / "p.tsv")
  edit_run(f, edit)
  rep = audit.audit(f, model_dir=model, rows=2, seed=0)
  assert not rep.ok and why in rep.reason, rep.reason
  assert run_cli("audit", f, "--model-dir", model, "--rows", "2") == 1


@pytest.mark.parametrize(
  "edit, why",
  [
    (lambda o: o.update(budget_rule=None), "method.options.budget_rule is null"),
    (lambda o: o.update(grid=[0, 0.5], budget_rule="looks"), "not a value of --grid"),
  ],
)
def test_an_option_certify_never_records_is_refused(run40, tmp_path, edit, why):
  """Red team 6: null where the option's default is not (IDRS's rate: the audit then crashed),
  or a value of another type than its parser gives (0 for 0.0)."""
  f = copy_run(run40, tmp_path / "o.tsv")
  edit_run(f, lambda r: edit(r["method"]["options"]))
  with pytest.raises(verify.VerifyError, match=why):
    verify.verify(f)


def test_method_details_of_another_shape_are_refused_in_one_line(run40, tmp_path):
  """Red team 6: details a list, a budget without its looks: a traceback of the API."""
  for details, why in (([1], "method.details must be a JSON object"),
                       ({"budget": {"ratio": 2.0}}, "method.details.budget.first")):  # fmt: skip
    f = copy_run(run40, tmp_path / "d.tsv")
    edit_run(f, lambda r, d=details: r["method"].update(details=d))
    with pytest.raises(verify.VerifyError, match=why):
      verify.verify(f)


def test_the_same_parameters_built_another_way_fail_the_audit(model, run40, tmp_path):
  """The fingerprint covers parameters only: a model directory whose config.json builds the
  same parameters into another function (here a normalization) must not pass as the run's."""
  import shutil

  other = tmp_path / "renormalized"
  shutil.copytree(model, other)
  cfg = json.loads((other / "config.json").read_text())
  cfg["model_kwargs"] = {**cfg.get("model_kwargs", {}), "normalize": [[0.5], [0.25]]}
  (other / "config.json").write_text(json.dumps(cfg))
  rep = audit.audit(run40, model_dir=other, rows=2, seed=0)
  assert not rep.ok and "configuration" in rep.reason, rep.reason
  assert audit.audit(run40, model_dir=model, rows=2, seed=0).ok
  from rsjax.records.canonical import model_config_digest

  named = json.loads((model / "config.json").read_text())
  assert verify.read_run(str(run40)).model.config == model_config_digest(named)


@pytest.mark.parametrize(
  "text, why",
  [
    ('{"format": "rsjax-run/3", "format": "rsjax-run/3"}', "'format' appears twice"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
  ],
)
def test_a_record_with_a_key_twice_or_nested_too_deeply_is_refused(run40, tmp_path, text, why):
  f = copy_run(run40, tmp_path / "j.tsv")
  (tmp_path / "j.tsv.run.json").write_text(text)
  with pytest.raises(verify.VerifyError, match=why):
    verify.verify(f)


def test_ddrs_sigmas_stated_higher_than_drawn_fail_the_audit(model, tmp_path):
  """Red team: with the audit comparing sigma(x) to 1e-5, every DDRS sigma raised by 9e-6
  (relative), its radii and the memory's replay recomputed, passed verify and the audit."""
  from rsjax.ddrs._check import replay_memory
  from rsjax.verify._run import certificate_view

  f = certify(model, tmp_path / "d.tsv", "--method", "ddrs", "--ddrs-steps", "2", "--max", "30",
              "--skip", "10")  # fmt: skip
  raise_by = 1 + 9e-6
  for idx in io.read_certify(f).idx.tolist():
    edit_record(f, idx, lambda r: {**r, "sigma": float(np.float32(r["sigma"] * raise_by))})
  run, res, recs = verify.read_run(str(f)), io.read_certify(f), record.read_records(f)
  rows = claims.read_rows(certificate_view(run), res, recs, [])
  sigma = np.array([recs[int(i)]["sigma"] for i in res.idx])
  pred_mc, rad_mc, p_lower = claims.cohen_certificate(certificate_view(run), rows, sigma)
  x = np.asarray(data.load("digits", "test").get_batch(np.asarray(res.idx))[0])
  pred, rad = replay_memory(x.reshape(len(res), -1), pred_mc, rad_mc)
  for j, idx in enumerate(res.idx.tolist()):
    edit_record(f, idx, lambda r, j=j: {**r, "p_lower": float(p_lower[j])})
    for column, value in (("sigma", repr(float(sigma[j]))), ("radius_mc", repr(float(rad_mc[j]))),
                          ("predict_mc", str(int(pred_mc[j]))), ("predict", str(int(pred[j]))),
                          ("radius", repr(float(rad[j]) if pred[j] >= 0 else 0.0))):  # fmt: skip
      edit_column(f, j, column, lambda _, v=value: v)
  assert verify.verify(f).ok  # the radii follow from the stated sigmas: only the model can tell
  rep = audit.audit(f, model_dir=model, rows="all", seed=0)
  assert not rep.ok and "sigma" in rep.reason, rep.reason


# ----------------------------------------------------------------------------- the third red team
# The configuration check was skipped when a record left model.config out: a run certified with
# the same parameters built another way (a normalization in config.json), its config dropped,
# passed verify and `audit --rows all` given the forger's model directory.


@pytest.mark.parametrize(
  "edit, why",
  [
    (lambda r: r["model"].pop("config") and None, "model.config is missing"),
    (lambda r: r["model"].update(source="elsewhere"), "model.source must be one of"),
    (lambda r: r["method"].update(multiclass="false"), "method.multiclass must be a JSON bool"),
    (lambda r: r["method"].update(alpha=0.5), "method.alpha is not an entry"),
    (lambda r: r["data"].update(count=3), "data.count is not an entry"),
    (lambda r: r["sigma"].update(scale=2), "sigma.scale is not an entry"),
    (lambda r: r.update(note="x"), "note is not an entry"),
  ],
)
def test_a_record_part_certify_never_writes_is_refused(run40, tmp_path, edit, why):
  f = copy_run(run40, tmp_path / "p.tsv")
  edit_run(f, edit)
  with pytest.raises(verify.VerifyError, match=why):
    verify.verify(f)


def test_the_audit_needs_the_configuration_and_the_architecture_named(model, run40, tmp_path):
  f = copy_run(run40, tmp_path / "a.tsv")
  edit_run(
    f, lambda r: r["model"].update(source="library", config=None) or r["model"].pop("config")
  )
  assert verify.verify(f).ok  # a model built in code: nothing to load, nothing to compare
  rep = audit.audit(f, model_dir=model, rows=1, seed=0)
  assert not rep.ok and "records no configuration digest" in rep.reason, rep.reason
  g = copy_run(run40, tmp_path / "b.tsv")
  edit_run(g, lambda r: r["model"].update(architecture="resnet110"))
  rep = audit.audit(g, model_dir=model, rows=1, seed=0)
  assert not rep.ok and "architecture 'resnet110'" in rep.reason, rep.reason


def test_the_record_shape_table_is_what_certify_writes(run40):
  from rsjax.records import limits

  rec = json.loads((run40.parent / (run40.name + ".run.json")).read_text())
  for part, names in limits.RECORD_SHAPE.items():
    section = rec if not part else rec[part]
    assert set(section) <= names, part
  assert set(rec) == limits.RECORD_SHAPE[""]


# ----------------------------------------------------------------------------- the fourth red team
# A dataset given as an array file was named by its path only: a hand-made `digits.npz` of the
# inputs the model certifies, split "test", read "labels and inputs are those of digits.npz
# test" in both checks (certified accuracy 0.68 -> 1.00 at r = 0).


def test_an_array_file_dataset_is_bound_by_its_hash_and_said_to_be_the_authors(model, tmp_path):
  from rsjax import data as data_lib

  x, y = data_lib.load("digits", "test").arrays()
  npz = tmp_path / "digits.npz"
  np.savez(npz, x=x[:12], y=y[:12], num_classes=10)
  f = certify(model, tmp_path / "f.tsv", "--dataset", npz, "--max", "12")
  run = verify.read_run(str(f))
  assert run.data.file_sha256 is not None and len(run.data.file_sha256) == 64
  said = verify.verify(f).summary()
  assert "supplied with the run" in said and "those of digits" not in said, said
  rep = audit.audit(f, model_dir=model, rows=2, seed=0)
  assert rep.ok and "chosen by the run's author" in rep.summary(), rep.summary()
  np.savez(npz, x=x[12:24], y=y[12:24], num_classes=10)  # other inputs, the same path
  rep = audit.audit(f, model_dir=model, rows=2, seed=0)
  failed = [c.detail for c in rep.checks if not c.ok]
  assert not rep.ok and any("is not the run's" in d for d in failed), failed
  g = copy_run(f, tmp_path / "g.tsv")
  edit_run(g, lambda r: r["data"].pop("file_sha256") and None)
  with pytest.raises(verify.VerifyError, match="data.file_sha256 is missing"):
    verify.verify(g)


@pytest.mark.parametrize(
  "edit, why",
  [
    (lambda r: r["sigma"].update(source="the model's card"), "sigma.source must be one of"),
    (lambda r: r["versions"].update(note="audited by X"), "versions must map"),
    (lambda r: r["versions"].update(rsjax=9.9), "versions must map"),
  ],
)
def test_free_text_in_a_record_is_refused(run40, tmp_path, edit, why):
  f = copy_run(run40, tmp_path / "t.tsv")
  edit_run(f, edit)
  with pytest.raises(verify.VerifyError, match=why):
    verify.verify(f)


# ----------------------------------------------------------------------------- the sixth red team


def test_analyze_refuses_two_files_of_one_label(run40, tmp_path, capsys):
  """Two honest runs named alike (``a/r.tsv``, ``b/r.tsv``): one label's row showed the other
  file's numbers under the first file's claim."""
  for d in ("a", "b"):
    (tmp_path / d).mkdir()
    copy_run(run40, tmp_path / d / "r.tsv")
  assert run_cli("analyze", tmp_path / "a" / "r.tsv", tmp_path / "b" / "r.tsv") == 2
  assert "two files are labelled 'r.tsv'" in capsys.readouterr().err


def test_easy_hard_refuses_a_reference_of_other_inputs(model, tmp_path, capsys):
  """A reference certified on the train split over the same idx range split the test rows
  by other inputs' p_A (the hard subset's accuracy 0.0 -> 0.8)."""
  rows = ("--skip", "7", "--max", "70", "--save-counts")
  test = certify(model, tmp_path / "test.tsv", *rows)
  ref = certify(model, tmp_path / "train.tsv", "--split", "train", *rows)
  assert run_cli("analyze", test, "--easy-hard", ref) == 2
  assert "not the same inputs" in capsys.readouterr().err
  assert run_cli("analyze", test, "--easy-hard", test) == 0


# ----------------------------------------------------------------------------- the eighth red team


def test_a_chain_count_on_a_run_without_chains_is_not_an_audit_error(model, run40, tmp_path):
  """``details.chains`` "abc" on a Cohen run verified, then stopped the audit (exit 2) before
  any row was drawn: a forged run read as "could not audit". It is read for SRS only, as a
  JSON integer, and anything the audit cannot rebuild fails its method check."""
  f = copy_run(run40, tmp_path / "c.tsv")
  edit_run(f, lambda r: r["method"].update(details={"chains": "abc"}))
  rep = audit.audit(f, model_dir=model, rows=2, seed=0)
  assert not rep.ok and "method" in rep.reason, rep.reason
  assert run_cli("audit", f, "--model-dir", model, "--rows", "2") == 1


def test_a_stated_alpha_is_printed_for_a_recertified_run_only(run40, tmp_path, capsys):
  """``details.alpha`` 1e-9 on a Cohen run was printed by verify and analyze as the level."""
  f = copy_run(run40, tmp_path / "a.tsv")
  edit_run(f, lambda r: r["method"].update(details={"alpha": 1e-9}))
  assert "1e-09" not in verify.verify(f).summary()
  assert run_cli("analyze", f) == 0
  assert "1e-09" not in capsys.readouterr().out


def test_analyze_says_seed_rows_and_what_verify_rejects(run40, tmp_path, capsys):
  """Issue 68, items 4 and 5: the run line states the seed and the rows of the split the run
  covers, marks a run of part of its split, and one that verify rejects or cannot check."""
  size = RunSpec.read(run40).data.size
  assert run_cli("analyze", run40) == 0
  out = capsys.readouterr().out
  assert f"seed 0, digits test rows 0:280:7 of {size} (PART of the split)" in out
  assert "REJECTS" not in out
  f = copy_run(run40, tmp_path / "edited.tsv")
  edit_column(f, 0, "radius", lambda _: "2.0")
  assert run_cli("analyze", f) == 0
  assert "edited.tsv: rsjax verify REJECTS it" in capsys.readouterr().out
  bare = tmp_path / "bare.tsv"
  bare.write_text(run40.read_text())
  assert run_cli("analyze", bare) == 0
  assert "no run record: rsjax verify cannot check bare.tsv" in capsys.readouterr().out


@pytest.mark.parametrize("suffix", ["", ".cert.jsonl", ".run.json"])
def test_bytes_that_are_not_utf8_are_named_by_file_and_line(run40, tmp_path, capsys, suffix):
  """Issue 68, item 5: a UTF-8 decode error printed without the file and the line."""
  f = copy_run(run40, tmp_path / "b.tsv")
  target = tmp_path / ("b.tsv" + suffix)
  lines = target.read_bytes().split(b"\n")
  lines[1] = b"\xff" + lines[1]
  target.write_bytes(b"\n".join(lines))
  assert run_cli("verify", f) == 2
  err = capsys.readouterr().err
  assert "b.tsv" + suffix in err and "line 2: not UTF-8" in err, err


def test_the_samples_message_shows_a_plain_number():
  """Issue 68, item 5: the edited-samples message printed ``np.float64(100.0)``."""
  from rsjax.verify._columns import check_generic

  one = np.zeros(1, np.int64)
  res = io.CertifyResults(
    idx=one, label=one, predict=one, correct=one.astype(bool), time=np.zeros(1),
    extra={"samples": np.asarray([100.0])}, radius=np.zeros(1),
  )  # fmt: skip
  (m,) = check_generic(res, {0: {"n": 200}}, n_max=200, num_classes=10)
  assert "samples 100.0 in the file" in m.reason and "np." not in m.reason
