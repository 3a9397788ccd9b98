"""The SRS experiment's per-image rows (``experiments/_srs_rows.py``): what lets the full
run stop anywhere, continue in a later session, and run as two processes at once."""

import json
import multiprocessing
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "experiments"))  # as `python experiments/x.py` has it

import _srs_rows as rows_lib  # noqa: E402
import srs_deq  # noqa: E402

RUN = {"model": "deq", "sigma": 0.25, "m": 744}


def _row(i, **kw):
  return {
    "id": i,
    "label": 1,
    "predict": 1,
    "radius": 0.1 * i,
    "seconds": 2.0,
    "cpu_seconds": 2.0,
    "compile": False,
    **kw,
  }


def test_rows_append_read_and_a_cut_short_tail(tmp_path):
  path = str(tmp_path / "rows.jsonl")
  assert rows_lib.read_rows(path, RUN) == []
  rows_lib.append_row(path, RUN, _row(0))
  rows_lib.append_row(path, RUN, _row(5))
  with open(path) as fh:
    assert json.loads(fh.readline()) == {"run": RUN}  # one header line, then the rows
  with open(path, "a") as fh:  # a run killed while writing a row
    fh.write(json.dumps(_row(10))[:17])
  assert [r["id"] for r in rows_lib.read_rows(path, RUN)] == [0, 5]
  rows_lib.append_row(path, RUN, _row(15))  # the cut-short line is dropped first
  assert [r["id"] for r in rows_lib.read_rows(path, RUN)] == [0, 5, 15]
  with pytest.raises(ValueError, match="other settings"):
    rows_lib.read_rows(path, {**RUN, "m": 420})


def _append_many(path, start):
  for i in range(start, start + 300):
    rows_lib.append_row(path, RUN, _row(i, note="x" * 200))


def test_two_processes_appending_to_one_rows_file_lose_nothing(tmp_path):
  path = str(tmp_path / "rows.jsonl")
  rows_lib.append_row(path, RUN, _row(-1))
  ctx = multiprocessing.get_context("spawn")
  procs = [ctx.Process(target=_append_many, args=(path, s)) for s in (0, 1000)]
  for p in procs:
    p.start()
  for p in procs:
    p.join(120)
    assert p.exitcode == 0
  ids = sorted(r["id"] for r in rows_lib.read_rows(path, RUN))
  assert ids == [-1, *range(300), *range(1000, 1300)]


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
    _row(0, seconds=9.0, compile=True),
    _row(1, seconds=4.0, cpu_seconds=4.0),
    _row(2, seconds=6.0, cpu_seconds=6.5),
    _row(3, predict=2),
    _row(4, predict=2, radius=0.0, seconds=9.0, cpu_seconds=5.0),
  ]  # waited for a core
  s = rows_lib.summarize(cfg, rows, "30A", 744)
  assert s["images"] == 5 and s["timed_images"] == 3 and s["waited_images"] == 1
  assert s["seconds_per_image"] == pytest.approx(4.0)  # neither the compile call nor the wait
  assert s["cpu_seconds_per_image"] == pytest.approx(12.5 / 3)
  # correct with radius >= r: ids 0-2 (radii 0, .1, .2); ids 3 and 4 are wrong
  assert s["certified_accuracy"] == {"0": 0.6, "0.25": 0.0, "0.5": 0.0, "0.75": 0.0, "1": 0.0}
  empty = rows_lib.summarize(cfg, [], "3B", 744)  # a piece whose images have no rows yet
  assert empty["images"] == 0 and empty["certified_accuracy"] is None and empty["acr"] is None
  results = {
    "standard-30A": s,
    "SRS-3B": {
      "seconds_per_image": 1.0,
      "cpu_seconds_per_image": None,
      "f_evals_per_image": 56_120,
    },
  }
  rows_lib.add_speedups(results, "standard-30A")
  assert results["SRS-3B"]["speedup_vs_standard"] == pytest.approx(4.0)
  assert results["SRS-3B"]["cpu_speedup_vs_standard"] is None
  assert results["SRS-3B"]["f_eval_ratio_vs_standard"] == pytest.approx(303_000 / 56_120)
  assert np.isclose(results["standard-30A"]["speedup_vs_standard"], 1.0)


def test_pieces_of_the_run_have_their_own_json(monkeypatch):
  """``--models``/``--sigmas``/``--from-image`` select a piece; its JSON is its own."""
  seen = {}
  monkeypatch.setattr(
    srs_deq, "run", lambda cfg, out, workdir, **kw: seen.update(cfg=cfg, out=out, workdir=workdir)
  )
  srs_deq.main(["--full", "--models", "mdeq", "--from-image", "120", "--report"])
  cfg = seen["cfg"]
  assert cfg.runs() == [("mdeq", 0.25)] and cfg.first_image == 120
  assert os.path.basename(seen["out"]) == "srs_deq_full_mdeq_sigma0.25_from120.json"
  assert os.path.samefile(seen["workdir"], os.path.join(ROOT, "results", "srs_deq_full"))
  srs_deq.main(["--full", "--models", "deq", "--sigmas", "0.5"])
  assert seen["cfg"].runs() == [("deq", 0.5)]
  assert os.path.basename(seen["out"]) == "srs_deq_full_deq_sigma0.5.json"


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
  """The run loop resumes from the rows: a second call over finished rows certifies no image,
  writes the JSON once (at the start) and does not claim that a rerun would continue."""
  cfg = srs_deq.Config(models=(("deq", (0.25,)),), max_images=3, block=2, images_every=100)
  certified, reports, logs = [], [], []

  def train_model(cfg, sigma, workdir, *args, **kw):  # no model: nothing is certified here
    os.makedirs(workdir, exist_ok=True)
    return None, [{"epoch": 1}], None

  monkeypatch.setattr(srs_deq, "train_model", train_model)
  monkeypatch.setattr(srs_deq.rsjax.models, "to_deq_fn", lambda model: (None, None))

  def report(cfg, ids, setups, out_path, t_start):  # records the 30A rows each JSON would see
    reports.append(
      {
        t: len(rows_lib.read_rows(st.paths[cfg.standard], st.headers[cfg.standard]))
        for t, st in setups.items()
      }
    )
    return {"runs": {}, "complete": False}

  def certify_image(cfg, deq_fn, variables, sigma, variant, m, x, label, image_id, compile_call):
    certified.append((variant, int(image_id)))
    return _row(int(image_id))

  monkeypatch.setattr(srs_deq.report_lib, "write_report", report)
  monkeypatch.setattr(rows_lib, "certify_image", certify_image)
  run = lambda **kw: srs_deq.run(  # noqa: E731
    cfg,
    str(tmp_path / "out.json"),
    str(tmp_path / "work"),
    log=logs.append,
    **kw,
  )
  run()
  assert sorted(certified) == sorted(
    (v, i) for v in srs_deq.variant_names(cfg) for i in (0, 100, 200)
  )
  assert reports == [{}, {"deq sigma=0.25": 2}, {"deq sigma=0.25": 3}]  # start, then each block
  certified.clear(), reports.clear(), logs.clear()
  run(max_minutes=0.0)
  assert certified == [] and len(reports) == 1
  assert not any("rerun the same command" in line for line in logs), logs
  # rows missing: a zero time budget stops before the first image left, and says so
  rows = os.path.join(tmp_path, "work", "deq_sigma0.25", "rows_SRS-3B.jsonl")
  with open(rows) as fh:
    lines = fh.readlines()
  with open(rows, "w") as fh:
    fh.writelines(lines[:-1])
  reports.clear(), logs.clear()
  run(max_minutes=0.0)
  assert certified == [] and len(reports) == 1
  assert any("rerun the same command to continue" in line for line in logs)
  reports.clear()
  run()
  assert certified == [("3B", 200)] and len(reports) == 2  # the start, the block of image 200
