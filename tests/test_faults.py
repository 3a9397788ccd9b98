"""Fault suite: each failure a user can run into, done for real.

Concurrent writers, mismatched resume, corrupted rows, a model with non-finite
outputs, unwritable output and ``kill -9`` during certify / predict / train.
Tiny models and tiny N keep each case to a few seconds.
"""

import math

import numpy as np
import pytest
from flax import nnx

from rsjax import training


class NanAfter(nnx.Module):
  """Linear classifier whose logits become NaN when the batch mean exceeds ``threshold``."""

  def __init__(self, din, num_classes, *, threshold=math.inf, rngs):
    self.lin = nnx.Linear(din, num_classes, rngs=rngs)
    self.threshold = threshold

  def __call__(self, x):
    import jax.numpy as jnp
    x = x.reshape(x.shape[0], -1)
    bad = jnp.mean(x, axis=1, keepdims=True) > self.threshold
    return jnp.where(bad, jnp.nan, self.lin(x))


def _digits(n=64):
  rng = np.random.default_rng(0)
  x = rng.uniform(0, 1, (n, 4, 4, 1)).astype(np.float32)
  y = (x.reshape(n, -1).mean(1) > 0.5).astype(np.int32)
  return x, y


def test_train_non_finite_loss_stops_and_names_the_step(tmp_path):
  x, y = _digits()
  # Inputs with mean > 0.55 give NaN logits: the first batch that holds one.
  model = NanAfter(16, 2, threshold=0.55, rngs=nnx.Rngs(0))
  with pytest.raises(FloatingPointError, match=r"non-finite .* at step 1 \(epoch 1, batch 1 of 4\)"):
    training.train(0, model, (x, y), sigma=0.0, epochs=2, batch_size=16, workdir=tmp_path / "w",
                   progress=False)
  assert not (tmp_path / "w" / "checkpoints" / "1").exists()


def test_train_finite_loss_runs(tmp_path):
  x, y = _digits()
  model = NanAfter(16, 2, rngs=nnx.Rngs(0))
  _, history = training.train(0, model, (x, y), sigma=0.1, epochs=1, batch_size=16,
                              progress=False)
  assert math.isfinite(history[0]["train_loss"])


def _nan_apply(params, x):
  """Linear logits, NaN for noisy inputs whose first pixel exceeds 0.9."""
  import jax.numpy as jnp
  x = x.reshape(x.shape[0], -1)
  return jnp.where(x[:, :1] > 0.9, jnp.nan, x @ params)


@pytest.mark.parametrize("fn", ["certify", "predict", "sample_counts"])
def test_non_finite_logits_raise_naming_the_ids(fn):
  import rsjax
  w = np.random.default_rng(0).normal(size=(16, 3)).astype(np.float32)
  x = np.full((4, 16), 0.1, np.float32)
  x[2, 0] = 0.95  # input with id 7 gives NaN logits
  kw = dict(sigma=0.01, num_classes=3, ids=np.array([5, 6, 7, 8]), batch_size=64)
  kw.update({"certify": dict(n0=10, n=100), "predict": dict(n=100),
             "sample_counts": dict(num=100)}[fn])
  with pytest.raises(FloatingPointError, match=r"NaN or inf logits .* ids \[7\]"):
    getattr(rsjax, fn)(0, _nan_apply, w, x, **kw)
  x[2, 0] = 0.5  # all finite: counts as usual
  out = getattr(rsjax, fn)(0, _nan_apply, w, x, **kw)
  assert len(out) == 4


def test_unbatched_input_gets_a_clear_error():
  import rsjax
  from rsjax import models
  apply_fn, params = models.to_apply_fn(
      models.create_model("mlp", num_classes=10, input_shape=(8, 8, 1), rngs=0))
  with pytest.raises(ValueError, match=r"add a batch axis, x\[None\]"):
    rsjax.certify(0, apply_fn, params, np.zeros((8, 8, 1), np.float32), sigma=0.25,
                  num_classes=10, n0=10, n=100)


# ----------------------------------------------------------------------------- result files


def _write_rows(path, idx, run=None, resume=True):
  from rsjax import io
  with io.ResultsWriter(path, kind="certify", run=run, resume=resume) as w:
    for i in idx:
      w.write(idx=i, label=1, predict=1, radius=0.5, time=0.1)


def test_pandas_reads_files_with_a_run_record(tmp_path):
  pd = pytest.importorskip("pandas")
  from rsjax import io
  path = tmp_path / "o.tsv"
  _write_rows(path, [0, 1, 2], run={"N": 100, "sigma": 0.25})
  assert io.read_run_record(path) == {"N": 100, "sigma": 0.25}
  df = pd.read_csv(path, sep="\t")  # as Cohen et al.'s analyze.py reads it
  assert list(df.columns) == list(io.CERTIFY_COLUMNS) and len(df) == 3
  assert df["radius"].tolist() == [0.5] * 3


def test_mismatched_resume_names_the_differing_fields(tmp_path):
  from rsjax import io
  path = tmp_path / "o.tsv"
  run = {"N": 2000, "sigma": 0.25, "alpha": 0.001, "model": "abc"}
  _write_rows(path, [0, 1], run=run)
  _write_rows(path, [2], run=dict(run))  # the same run resumes
  with pytest.raises(io.RunMismatchError,
                     match=r"N 2000 in the file, 500 now; alpha 0.001 .* 0.1 now") as e:
    _write_rows(path, [3], run=dict(run, N=500, alpha=0.1))
  assert "sigma" not in str(e.value) and "\n" not in str(e.value)
  assert list(io.read_certify(path).idx) == [0, 1, 2]  # untouched
  _write_rows(path, [7], run=dict(run, N=500), resume=False)  # overwrite starts over
  assert list(io.read_certify(path).idx) == [7]
  assert io.read_run_record(path)["N"] == 500
  (tmp_path / "o.tsv.run.json").unlink()  # rows of an unknown run are not resumed
  with pytest.raises(io.RunMismatchError, match="no run record"):
    _write_rows(path, [8], run=run)


@pytest.mark.parametrize("row, needle", [
    ("55\tx\ty\tzz\tq\tw", r"line 4: label must be an integer >= 0, got 'x'"),
    ("55\t1\t1\t0.5\t1", r"line 4: 5 fields, expected 6"),
    ("1\t1\t1\t0.5\t1\t0.1", r"line 4: duplicate idx 1 \(also on line 3\)"),
    ("56\t1\t1\tnan\t1\t0.1", r"line 4: radius must be a finite number >= 0, got 'nan'"),
])
def test_corrupted_rows_are_errors_naming_file_and_line(tmp_path, row, needle):
  from rsjax import io
  path = tmp_path / "o.tsv"
  _write_rows(path, [0, 1])
  with open(path, "a") as f:
    f.write(row + "\n2\t1\t1\t0.5\t1\t0.1\n")
  for read in (lambda: io.resume(path), lambda: io.read_certify(path)):
    with pytest.raises(ValueError, match="o.tsv' " + needle):
      read()


def test_only_an_incomplete_last_line_is_repaired(tmp_path):
  from rsjax import io
  path = tmp_path / "o.tsv"
  _write_rows(path, [0, 1])
  with open(path, "a") as f:
    f.write("2\t1\t1\t0.4")  # killed mid-row
  assert list(io.read_certify(path).idx) == [0, 1]
  assert io.resume(path) == {0, 1}
  assert path.read_text().endswith("0.1\n")


def test_second_writer_is_refused_while_the_first_holds_the_lock(tmp_path):
  import subprocess
  import sys
  from rsjax import io
  path = tmp_path / "o.tsv"
  with io.ResultsWriter(path, kind="certify") as w:
    w.write(idx=0, label=1, predict=1, radius=0.5, time=0.1)
    # A real second process (flock is per open file, so this also holds across processes).
    code = ("import sys; from rsjax import io\n"
            "try:\n  io.ResultsWriter(sys.argv[1], kind='certify')\n"
            "except io.ResultsLockedError as e:\n  print(e); sys.exit(3)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr
    assert "being written by another run" in proc.stdout
    with pytest.raises(io.ResultsLockedError):
      io.ResultsWriter(path, kind="certify", resume=False)  # not even overwrite
  assert list(io.read_certify(path).idx) == [0]
  _write_rows(path, [1])  # released on close
