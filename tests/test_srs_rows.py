"""The SRS experiment's runs and rows (``experiments/srs_deq.py``, ``_srs_rows.py``): each
(model, sigma, method) is a run that ``rsjax verify`` accepts, certified in rounds that stop
anywhere and continue in a later session, and summarized from the runs' rows."""

import json
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "experiments"))  # as `python experiments/x.py` has it

import _srs_config  # noqa: E402
import _srs_rows as rows_lib  # noqa: E402
import srs_deq  # noqa: E402


def _row(i, **kw):
  return {"id": i, "label": 1, "predict": 1, "radius": 0.1 * i, "seconds": 2.0, **kw}


def test_f_evals_of_the_full_run():
  cfg = srs_deq.get_config(False)
  m = srs_deq.check_samples(cfg, 0.25)
  assert m == 744
  assert rows_lib.f_evals(cfg, "30A", m) == 10_100 * 30
  # SRS-3B: 10 warm-up steps on 100 and 400 chains, then 3 steps a sample, then 744 x 30A
  assert rows_lib.f_evals(cfg, "3B", m) == 100 * 10 + 400 * 10 + 9_600 * 3 + 744 * 30 == 56_120
  assert rows_lib.f_evals(cfg, "1A", m) == 1_000 + 4_000 + 9_600 + 22_320


def test_summary_and_speedups():
  cfg = srs_deq.get_config(False)
  rows = [
    _row(0, seconds=30.0),  # the process's first call: compiled
    _row(1, seconds=4.0),
    _row(2, seconds=6.0),
    _row(3, predict=2, seconds=5.0),
    _row(4, predict=2, radius=0.0, seconds=9.0),
  ]
  s = rows_lib.summarize(cfg, rows, "30A", 744)
  assert s["images"] == 5
  assert s["seconds_per_image"] == pytest.approx(6.0)  # the median: not the compile call
  assert s["wall_seconds_total"] == pytest.approx(54.0)
  # correct with radius >= r: ids 0-2 (radii 0, .1, .2); ids 3 and 4 are wrong
  assert s["certified_accuracy"] == {"0": 0.6, "0.25": 0.0, "0.5": 0.0, "0.75": 0.0, "1": 0.0}
  empty = rows_lib.summarize(cfg, [], "3B", 744)  # a piece whose images have no rows yet
  assert empty["images"] == 0 and empty["certified_accuracy"] is None and empty["acr"] is None
  results = {"standard-30A": s, "SRS-3B": {"seconds_per_image": 1.5, "f_evals_per_image": 56_120}}
  rows_lib.add_speedups(results, "standard-30A")
  assert results["SRS-3B"]["speedup_vs_standard"] == pytest.approx(4.0)
  assert results["SRS-3B"]["f_eval_ratio_vs_standard"] == pytest.approx(303_000 / 56_120)
  assert np.isclose(results["standard-30A"]["speedup_vs_standard"], 1.0)


def test_variants_are_the_registry_methods():
  """30A is ``deq-standard``; SRS-3B is ``srs`` with Broyden chains after a Broyden warm-up
  chunk, m check samples solved with 30A: options the registry takes as they are."""
  from rsjax import methods

  cfg = srs_deq.get_config(False)
  assert _srs_config.method_options(cfg, "30A", 744) == (
    "deq-standard",
    {"deq_solver": "anderson", "deq_steps": 30},
  )
  method, options = _srs_config.method_options(cfg, "3B", 744)
  assert method == "srs" and options == {
    "deq_solver": "broyden",
    "deq_steps": 3,
    "deq_warmup_solver": "broyden",
    "deq_warmup_steps": 10,
    "srs_m": 744,
    "srs_check_steps": 30,
    "srs_correction": "paper",
  }
  for v in srs_deq.variant_names(cfg):
    method, options = _srs_config.method_options(cfg, v, 744)
    assert set(options) <= set(methods.get(method).defaults())


def test_pieces_of_the_run_have_their_own_json(monkeypatch):
  """``--models``/``--sigmas`` select a piece; its JSON is its own, its runs the full run's
  (in results/srs_deq_full/)."""
  seen = {}
  monkeypatch.setattr(
    srs_deq,
    "run",
    lambda cfg, out, workdir, rundir, **kw: seen.update(
      cfg=cfg, out=out, workdir=workdir, rundir=rundir
    ),
  )
  srs_deq.main(["--full", "--models", "mdeq", "--report"])
  assert seen["cfg"].runs() == [("mdeq", 0.25)]
  assert os.path.basename(seen["out"]) == "srs_deq_full_runs_mdeq_sigma0.25.json"
  for d in ("workdir", "rundir"):
    assert os.path.samefile(seen[d], os.path.join(ROOT, "results", "srs_deq_full"))
  srs_deq.main(["--full", "--models", "deq", "--sigmas", "0.5"])
  assert seen["cfg"].runs() == [("deq", 0.5)]
  assert os.path.basename(seen["out"]) == "srs_deq_full_runs_deq_sigma0.5.json"
  srs_deq.main(["--quick"])  # its models in runs/, its runs in results/
  assert os.path.basename(seen["out"]) == "srs_deq_quick.json"
  assert seen["workdir"] == os.path.join(ROOT, "runs", "srs_deq_quick")
  assert seen["rundir"] == os.path.join(ROOT, "results", "srs_deq_quick")


def test_methods_split_one_run_between_processes(monkeypatch, tmp_path):
  """``--methods`` certifies only the methods named (two processes can share a (model,
  sigma)); an unknown name is refused before anything runs."""
  import dataclasses

  seen, calls = {}, []
  monkeypatch.setattr(srs_deq, "run", lambda *a, **kw: seen.update(kw))
  srs_deq.main(["--full", "--models", "mdeq", "--methods", "SRS-1A", "standard-30A", "--report"])
  assert seen["methods"] == ["SRS-1A", "standard-30A"]
  with pytest.raises(SystemExit):
    srs_deq.main(["--full", "--methods", "SRS-2A"])
  monkeypatch.undo()
  monkeypatch.setattr(srs_deq, "train_model", lambda *a, **kw: (None, [], 0.0))
  monkeypatch.setattr(srs_deq, "certify_piece", lambda cfg, st, v, *a: calls.append(v) or 0)
  report = {"complete": False, "runs": {}}
  monkeypatch.setattr(srs_deq.report_lib, "write_report", lambda *a, **kw: report)
  cfg = dataclasses.replace(srs_deq.get_config(False), models=(("deq", (0.5,)),))
  cfg = dataclasses.replace(cfg, images_every=500)  # 2 images: one round
  srs_deq.run(cfg, str(tmp_path / "out.json"), str(tmp_path), methods={"SRS-1A", "SRS-3B"})
  assert calls == ["1A", "3B"]
  srs_deq.run(cfg, str(tmp_path / "out.json"), str(tmp_path))
  assert calls[2:] == ["30A", "1A", "3A", "1B", "3B"]


def test_losses_below_cap_name_their_causes():
  """One synthetic image per cause at r = 0.5 (sigma 0.25, m = 744: cap 0.55)."""
  from scipy import stats as st

  from rsjax import srs, stats

  cfg = srs_deq.get_config(False)
  n, alpha, m, target = cfg.n, cfg.alpha, 744, st.norm.cdf(2.0)
  srs_bound = lambda c, mm: float(srs.srs_p_lower(c, n, mm, mm, alpha)[0])  # noqa: E731
  # a count standard RS certifies at 0.5 and SRS would not whatever m: the alpha / 2 split
  split = next(c for c in range(9_000, n) if stats.clopper_pearson_lower(c, n, alpha) >= target)
  assert srs_bound(split, 10**7) < target
  few = 9_850  # certified by standard RS; SRS needs more than 744 checks
  assert stats.clopper_pearson_lower(few, n, alpha) >= target and srs_bound(few, m) < target
  srs_row = {"predict": 1, "label": 1, "radius": 0.3, "check_selected": m, "check_agree": m}
  cases = {
    "labels": dict(predict=2, count=10_000),
    "check_disagreements": dict(count=10_000, check_agree=m - 3),
    "alpha_split": dict(count=split),
    "too_few_checks": dict(count=few),
  }
  std_rows = [_row(i, radius=0.6, count=c["count"]) for i, c in enumerate(cases.values())]
  srs_rows = [{**srs_row, "id": i, **c} for i, c in enumerate(cases.values())]
  srs_rows.append({**srs_row, "id": 9, "radius": 0.52, "count": 10_000})  # kept: not lost
  std_rows.append(_row(9, radius=0.6, count=10_000))
  out = rows_lib.losses_below_cap(cfg, std_rows, srs_rows, "3B", m, 0.25)
  assert set(out) == {"0", "0.25", "0.5"}  # the radii below the cap 0.55
  assert out["0"]["lost"] == 1 and out["0"]["causes"] == {"labels": 1}
  got = out["0.5"]
  assert got["lost"] == 4 and got["causes"] == {c: 1 for c in cases}
  m_needed = got["m_needed"]  # the smallest m whose bound (checks as the count says) reaches r
  m_a = lambda mm: int(mm * few / n)  # noqa: E731
  assert srs_bound(few, m_a(m_needed)) >= target > srs_bound(few, m_a(m_needed - 1))
  assert m_needed > m
  assert got["f_eval_ratio_at_m_needed"] == pytest.approx(
    rows_lib.f_evals(cfg, "30A", m_needed) / rows_lib.f_evals(cfg, "3B", m_needed)
  )


def test_rerunning_a_finished_run_certifies_and_rewrites_nothing(tmp_path, monkeypatch):
  """The run loop goes in rounds and resumes from the runs: a second call over finished runs
  certifies no image, writes the JSON once (at the start) and does not claim that a rerun
  would continue; a time limit stops it before the next image, and says so."""
  cfg = srs_deq.Config(models=(("deq", (0.25,)),), block=2, images_every=400)  # 3 images
  rows, calls, reports, logs = {}, [], [], []

  def train_model(cfg, sigma, workdir, *args, **kw):  # no model: nothing is certified here
    os.makedirs(workdir, exist_ok=True)
    history = [{"epoch": e + 1} for e in range(cfg.epochs)]
    with open(os.path.join(workdir, "history.json"), "w") as fh:
      json.dump(history, fh)  # trained: the next call sets it up at the start
    return None, history, None

  def certify_piece(cfg, st, v, test, allowed, deadline):  # the rows a run would write
    have = rows.setdefault(st.paths[v], [])
    new = [] if srs_deq.time.perf_counter() > deadline else sorted(allowed - set(have))
    have += new
    calls.extend((v, i) for i in new)
    return len(new)

  def report(cfg, ids, setups, out_path, t_start):  # records the 30A rows each JSON would see
    reports.append({t: len(rows.get(st.paths[cfg.standard], [])) for t, st in setups.items()})
    done = [len(rows.get(p, [])) == len(ids) for st in setups.values() for p in st.paths.values()]
    return {"runs": {}, "complete": bool(setups) and all(done)}

  monkeypatch.setattr(srs_deq, "train_model", train_model)
  monkeypatch.setattr(srs_deq, "certify_piece", certify_piece)
  monkeypatch.setattr(srs_deq.report_lib, "write_report", report)
  run = lambda **kw: srs_deq.run(  # noqa: E731
    cfg, str(tmp_path / "out.json"), str(tmp_path / "work"), log=logs.append, **kw
  )
  run()
  assert sorted(calls) == sorted((v, i) for v in srs_deq.variant_names(cfg) for i in (0, 400, 800))
  assert reports == [{}, {"deq sigma=0.25": 2}, {"deq sigma=0.25": 3}]  # start, then each round
  paths = sorted(rows)
  assert [os.path.relpath(p, tmp_path) for p in paths] == [
    os.path.join("work", "deq_sigma0.25", f"{name}.tsv")
    for name in sorted(srs_deq.variant_names(cfg).values())
  ]
  calls.clear(), reports.clear(), logs.clear()
  run(max_minutes=0.0)
  assert calls == [] and len(reports) == 1
  assert not any("rerun the same command" in line for line in logs), logs
  rows[paths[0]].pop()  # a row missing: a zero time limit stops before it, and says so
  reports.clear(), logs.clear()
  run(max_minutes=0.0)
  assert calls == [] and len(reports) == 1
  assert any("rerun the same command to continue" in line for line in logs)
  reports.clear()
  run()
  assert len(calls) == 1 and len(reports) == 2  # the start, the round of the missing row


@pytest.mark.heavy
def test_a_piece_certifies_a_run_that_verifies_and_reads_back(tmp_path):
  """``certify_piece``: one (model, sigma, method) is a run of ``_common.certify_run`` that
  ``rsjax verify`` accepts; a round stops it after its images, the next resumes it, and
  ``read_run`` gives its rows with the SRS check counts (a small DEQ with the Jacobian
  regularizer's key among its variables, on the 8x8 digits)."""
  import types

  from rsjax import data, models, verify

  test = data.load("digits", "test")
  config = {"model": "deq", "num_classes": 10, "input_shape": [8, 8, 1], "dataset": "digits"}
  kw = dict(channels=4, groups=2, normalize=None, jac_weight=1.0)
  model = models.create_model("deq", num_classes=10, input_shape=(8, 8, 1), rngs=0, **kw)
  models.save_model(str(tmp_path / "model"), model, config | {"model_kwargs": kw})
  cfg = srs_deq.Config(n0=10, n=60, m=20, chains=20, images_every=120, srs=("1B",))
  st = types.SimpleNamespace(
    model=model,
    model_dir=str(tmp_path / "model"),
    sigma=0.5,
    m=cfg.m,
    paths={v: str(tmp_path / f"{name}.tsv") for v, name in srs_deq.variant_names(cfg).items()},
  )
  ids = list(range(0, len(test), cfg.images_every))
  for v in st.paths:
    assert srs_deq.certify_piece(cfg, st, v, test, set(ids[:2]), float("inf")) == 2
    assert srs_deq.certify_piece(cfg, st, v, test, set(ids), 0.0) == 0  # past the time limit
    report = verify.verify(st.paths[v])  # a run in progress: its rows verify, it is incomplete
    assert not report.mismatches and not report.complete
    assert srs_deq.certify_piece(cfg, st, v, test, set(ids), float("inf")) == len(ids) - 2
    assert verify.verify(st.paths[v]).ok
  std, srs_rows = (rows_lib.read_run(st.paths[v], cfg.alpha) for v in ("30A", "1B"))
  assert [r["id"] for r in std] == [r["id"] for r in srs_rows] == ids
  assert all(r["count"] <= cfg.n and r["seconds"] > 0 for r in std + srs_rows)
  assert "check_selected" not in std[0]
  for r in srs_rows:
    assert 0 <= r["check_agree"] <= r["check_selected"] <= cfg.m
    assert 0.0 <= r["mismatch_upper"] <= 1.0


def test_table_of_the_report():
  """``--report`` logs the docstring's table: one line per method with its numbers."""
  cfg = srs_deq.get_config(False)
  checks = {"check_selected": 744, "check_agree": 744, "mismatch_upper": 0.01}
  rows = [_row(0, **checks), _row(1, predict=2, **checks), _row(2, **checks), _row(3, **checks)]
  results = {
    name: rows_lib.summarize(cfg, rows, v, 744)
    for v, name in _srs_config.variant_names(cfg).items()
  }
  rows_lib.add_speedups(results, "standard-30A")
  run = {"images_done": 4, "images_total": 200, "results": results}
  empty = {"images_done": 0, "results": {"SRS-1A": rows_lib.summarize(cfg, [], "1A", 744)}}
  report = {"runs": {"deq sigma=0.25": run, "mdeq sigma=0.25": empty}}
  lines = srs_deq.report_lib.table(report).splitlines()
  assert lines[0] == "deq sigma=0.25: 4 of 200 images"
  assert len(lines) == 1 + len(results) + 1 and lines[-1] == "mdeq sigma=0.25: no images yet"
  # correct with radius 0, 0.2, 0.3: certified 3/4 at 0, 1/4 at 0.25, 0 beyond; ACR 0.125
  assert lines[1].split() == [
    "standard-30A", "cert.", "acc.", "0.750", "0.250", "0.000", "0.000", "0.000",
    "ACR", "0.125", "s/image", "2.0", "speed-up", "1.0x", "f-eval", "ratio", "1.0x",
  ]  # fmt: skip
  assert lines[2].split()[0] == "SRS-1A" and lines[2].endswith("f-eval ratio 8.2x")
