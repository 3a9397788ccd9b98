"""Tests of rsjax.records.io: the certify/predict file format, durable writes and resume."""

import os

import numpy as np
import pytest

from rsjax.records import io


def _write_certify(path, rows, **kw):
  with io.ResultsWriter(path, kind="certify", **kw) as w:
    for r in rows:
      w.write(**r)


def test_certify_round_trip(tmp_path):
  path = tmp_path / "cert.tsv"
  rng = np.random.default_rng(0)
  radius = rng.uniform(0, 2, size=20)
  predict = rng.integers(-1, 10, size=20)
  radius[predict == -1] = 0.0
  label = rng.integers(0, 10, size=20)
  label[predict == -1] = 3
  keep = np.arange(20) < 5
  label[keep & (predict != -1)] = predict[keep & (predict != -1)]
  times = rng.uniform(0, 20, size=20)
  idx = np.arange(0, 400, 20)
  with io.ResultsWriter(path, kind="certify") as w:
    w.write_many(idx=idx, label=label, predict=predict, radius=radius, time=times)
  res = io.read_certify(path)
  np.testing.assert_array_equal(res.idx, idx)
  np.testing.assert_array_equal(res.label, label)
  np.testing.assert_array_equal(res.predict, predict)
  # full precision: exact float equality, not 3 significant digits
  np.testing.assert_array_equal(res.radius, radius)
  np.testing.assert_array_equal(res.time, times)
  np.testing.assert_array_equal(res.correct, predict == label)
  assert res.correct.dtype == bool
  np.testing.assert_array_equal(res.correct[:5], predict[:5] != -1)
  lines = path.read_text().splitlines()
  assert lines[0] == "idx\tlabel\tpredict\tradius\tcorrect\ttime"
  assert len(lines) == 21
  # abstain rows: predict -1, radius 0.0, correct 0
  for line in lines[1:]:
    f = line.split("\t")
    if f[2] == "-1":
      assert f[3] == "0.0" and f[4] == "0"
  assert isinstance(io.read_results(path), io.CertifyResults)


def test_predict_round_trip_and_extra_columns(tmp_path):
  path = tmp_path / "pred.tsv"
  with io.ResultsWriter(path, kind="predict", extra_columns=("sigma",)) as w:
    w.write(idx=0, label=1, predict=1, time=0.5, sigma=0.25)
    w.write(idx=1, label=2, predict=-1, time=0.25, sigma=0.5)
  assert path.read_text().splitlines()[0] == "idx\tlabel\tpredict\tcorrect\ttime\tsigma"
  res = io.read_results(path)
  assert isinstance(res, io.PredictResults)
  np.testing.assert_array_equal(res.correct, [True, False])
  np.testing.assert_array_equal(res.extra["sigma"], [0.25, 0.5])
  np.testing.assert_array_equal(res.time, [0.5, 0.25])


def test_timedelta_and_float_times(tmp_path):
  assert io.parse_time("0:00:15.412345") == pytest.approx(15.412345)
  assert io.parse_time("1:02:03") == 3723.0
  assert io.parse_time("2 days, 0:00:01.5") == pytest.approx(2 * 86400 + 1.5)
  assert io.parse_time("15.4") == 15.4
  with pytest.raises(ValueError, match="time"):
    io.parse_time("fifteen")
  # a reference-style file (timedelta strings, 3-digit radii) and a shipped-log style one
  path = tmp_path / "ref.tsv"
  path.write_text(
    "idx\tlabel\tpredict\tradius\tcorrect\ttime\n"
    "0\t3\t3\t0.438\t1\t0:00:15.412345\n"
    "20\t8\t-1\t0.0\t0\t0:00:16.9\n"
    "40\t8\t8\t1.2\t1\t15.4\n"
  )
  res = io.read_certify(path)
  np.testing.assert_allclose(res.time, [15.412345, 16.9, 15.4])
  np.testing.assert_array_equal(res.radius, [0.438, 0.0, 1.2])
  np.testing.assert_array_equal(res.idx, [0, 20, 40])


def test_resume_truncated_last_line(tmp_path):
  path = tmp_path / "cert.tsv"
  rows = [
    dict(idx=i, label=i % 3, predict=i % 3, radius=0.1 * i + 1 / 3, time=1.0) for i in range(5)
  ]
  _write_certify(path, rows)
  clean = path.read_bytes()
  # simulate a kill in the middle of writing row 5
  with open(path, "ab") as f:
    f.write(b"5\t2\t2\t0.83333")
  done = io.resume(path)
  assert done == {0, 1, 2, 3, 4}
  assert path.read_bytes() == clean  # partial line dropped, file rewritten cleanly
  # a restarted run continues: no duplicate, no missing row
  with io.ResultsWriter(path) as w:
    assert w.done == done
    for i in range(10):
      if i in w.done:
        continue
      w.write(idx=i, label=0, predict=0, radius=0.5, time=2.0)
    with pytest.raises(ValueError, match="already"):
      w.write(idx=3, label=0, predict=0, radius=0.5, time=2.0)
  res = io.read_certify(path)
  np.testing.assert_array_equal(res.idx, np.arange(10))
  np.testing.assert_array_equal(res.radius[:5], [r["radius"] for r in rows])


def test_resume_new_file_partial_header_and_errors(tmp_path):
  path = tmp_path / "new.tsv"
  assert io.resume(path) == set()
  assert path.read_text() == "idx\tlabel\tpredict\tradius\tcorrect\ttime\n"
  # killed while writing the header
  path.write_text("idx\tlabel\tpre")
  assert io.resume(path) == set()
  assert path.read_text() == "idx\tlabel\tpredict\tradius\tcorrect\ttime\n"
  # a predict file is not a certify file
  other = tmp_path / "pred.tsv"
  io.resume(other, kind="predict")
  with pytest.raises(ValueError, match="not a certify file"):
    io.resume(other, kind="certify")
  # a malformed complete row in the middle is an error, not silently dropped
  bad = tmp_path / "bad.tsv"
  bad.write_text("idx\tlabel\tpredict\tradius\tcorrect\ttime\n0\t1\t1\n1\t1\t1\t0.5\t1\t1.0\n")
  with pytest.raises(ValueError, match="line 2"):
    io.resume(bad)
  with pytest.raises(ValueError, match="line 2"):
    io.read_certify(bad)


def test_writer_validation_and_overwrite(tmp_path):
  path = tmp_path / "c.tsv"
  with io.ResultsWriter(path) as w:
    with pytest.raises(ValueError, match="abstain"):
      w.write(idx=0, label=1, predict=-1, radius=0.3, time=1.0)
    with pytest.raises(ValueError, match="radius"):
      w.write(idx=0, label=1, predict=1, radius=-0.1, time=1.0)
    with pytest.raises(ValueError, match="radius is required"):
      w.write(idx=0, label=1, predict=1, time=1.0)
    w.write(idx=0, label=1, predict=1, radius=0.3, time=1.0)
  with io.ResultsWriter(path, resume=False) as w:
    assert w.done == set()
  assert len(io.read_certify(path)) == 0
  with pytest.raises(ValueError, match="kind"):
    io.ResultsWriter(tmp_path / "x.tsv", kind="train")


def test_rows_are_durable_before_close(tmp_path):
  """Each row is on disk as soon as write() returns (no buffering until close)."""
  path = tmp_path / "c.tsv"
  w = io.ResultsWriter(path)
  w.write(idx=7, label=1, predict=1, radius=0.25, time=1.0)
  # read through a separate descriptor while the writer is still open
  with open(os.fspath(path)) as f:
    assert f.read().splitlines()[1] == "7\t1\t1\t0.25\t1\t1.0"
  w.close()


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path):
  path = tmp_path / "noise.npz"
  io.atomic_write(path, lambda f: np.savez(f, mu=np.zeros(3), sigma=np.ones(3)))
  with np.load(path) as z:  # written through the file: no ".npz" added to the name
    np.testing.assert_array_equal(z["sigma"], np.ones(3))
  io.atomic_write_text(tmp_path / "a.txt", "first\n")

  def fail(f):
    f.write(b"partial")
    raise RuntimeError("disk full")

  with pytest.raises(RuntimeError, match="disk full"):
    io.atomic_write(tmp_path / "a.txt", fail)
  assert (tmp_path / "a.txt").read_text() == "first\n"  # the old file, whole
  assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "noise.npz"]  # no temporary left


def test_a_run_mismatch_names_the_differing_fields_of_nested_records(tmp_path):
  path = tmp_path / "rows.tsv"
  run = {"N": 40, "certificate": {"sampling": {"n": 40}, "versions": {"jax": "0.10.2"}}}
  with io.ResultsWriter(path, run=run) as w:
    w.write(idx=0, label=1, predict=1, radius=0.5)
  # A top-level setting differs: only it is named (the nested entries follow from it).
  other = {"N": 80, "certificate": {"sampling": {"n": 80}, "versions": {"jax": "0.10.2"}}}
  with pytest.raises(io.RunMismatchError, match=r"\(N 40 in the file, 80 now\)"):
    io.ResultsWriter(path, run=other)
  # Only a nested entry differs: it is named by its path.
  newer = {"N": 40, "certificate": {"sampling": {"n": 40}, "versions": {"jax": "0.10.3"}}}
  with pytest.raises(
    io.RunMismatchError, match=r"\(certificate.versions.jax '0.10.2' in the file, '0.10.3' now\)"
  ):
    io.ResultsWriter(path, run=newer)
  with io.ResultsWriter(path, run=run):  # the same run resumes
    pass
