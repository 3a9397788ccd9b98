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
  return {"id": i, "label": 1, "predict": 1, "radius": 0.1 * i, "seconds": 2.0, "cpu_seconds": 2.0,
          "compile": False, **kw}


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
  rows = [_row(0, seconds=9.0, compile=True), _row(1, seconds=4.0), _row(2, seconds=6.0),
          _row(3, predict=2)]
  s = rows_lib.summarize(cfg, rows, "30A", 744)
  assert s["images"] == 4 and s["timed_images"] == 3
  assert s["seconds_per_image"] == pytest.approx(4.0)  # the compile call is not timed
  # correct with radius >= r: ids 0-2 (radii 0, .1, .2); id 3 is wrong
  assert s["certified_accuracy"] == {"0": 0.75, "0.25": 0.0, "0.5": 0.0, "0.75": 0.0, "1": 0.0}
  results = {"standard-30A": s, "SRS-3B": {"seconds_per_image": 1.0, "cpu_seconds_per_image": None,
                                         "f_evals_per_image": 56_120}}
  rows_lib.add_speedups(results, "standard-30A")
  assert results["SRS-3B"]["speedup_vs_standard"] == pytest.approx(4.0)
  assert results["SRS-3B"]["cpu_speedup_vs_standard"] is None
  assert results["SRS-3B"]["f_eval_ratio_vs_standard"] == pytest.approx(303_000 / 56_120)
  assert np.isclose(results["standard-30A"]["speedup_vs_standard"], 1.0)


def test_pieces_of_the_run_have_their_own_json(monkeypatch):
  """``--models``/``--sigmas``/``--from-image`` select a piece; its JSON is its own."""
  seen = {}
  monkeypatch.setattr(srs_deq, "run", lambda cfg, out, workdir, **kw: seen.update(
      cfg=cfg, out=out, workdir=workdir))
  srs_deq.main(["--full", "--models", "mdeq", "--from-image", "120", "--report"])
  cfg = seen["cfg"]
  assert cfg.runs() == [("mdeq", 0.25)] and cfg.first_image == 120
  assert os.path.basename(seen["out"]) == "srs_deq_full_mdeq_sigma0.25_from120.json"
  assert os.path.samefile(seen["workdir"], os.path.join(ROOT, "results", "srs_deq_full"))
  srs_deq.main(["--full", "--models", "deq", "--sigmas", "0.5"])
  assert seen["cfg"].runs() == [("deq", 0.5)]
  assert os.path.basename(seen["out"]) == "srs_deq_full_deq_sigma0.5.json"
