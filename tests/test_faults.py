"""Fault suite: each failure a user can run into, done for real.

Concurrent writers, mismatched resume, corrupted rows, a model with non-finite
outputs, unwritable output and ``kill -9`` during certify / predict / train.
Tiny models and tiny N keep each case to a few seconds.
"""

import math

import numpy as np
import pytest
from flax import nnx

import rsjax
from rsjax import training

# A test of the tools around the library: .ci/run runs it in the py311 stage only.
pytestmark = pytest.mark.tools


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
  with pytest.raises(
    FloatingPointError, match=r"non-finite .* at step 1 \(epoch 1, batch 1 of 4\)"
  ):
    training.train(
      0,
      model,
      (x, y),
      training.TrainConfig(sigma=0.0, epochs=2, batch_size=16),
      workdir=tmp_path / "w",
      progress=False,
    )
  assert not (tmp_path / "w" / "checkpoints" / "1").exists()


def test_train_finite_loss_runs(tmp_path):
  x, y = _digits()
  model = NanAfter(16, 2, rngs=nnx.Rngs(0))
  _, history = training.train(
    0, model, (x, y), training.TrainConfig(sigma=0.1, epochs=1, batch_size=16), progress=False
  )
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
  kw.update(
    {"certify": dict(n0=10, n=100), "predict": dict(n=100), "sample_counts": dict(num=100)}[fn]
  )
  with pytest.raises(FloatingPointError, match=r"NaN or inf logits .* ids \[7\]"):
    getattr(rsjax, fn)(0, _nan_apply, w, x, **kw)
  x[2, 0] = 0.5  # all finite: counts as usual
  out = getattr(rsjax, fn)(0, _nan_apply, w, x, **kw)
  assert len(out) == 4


def test_unbatched_input_gets_a_clear_error():
  import rsjax
  from rsjax import models

  apply_fn, params = models.to_apply_fn(
    models.create_model("mlp", num_classes=10, input_shape=(8, 8, 1), rngs=0)
  )
  with pytest.raises(ValueError, match=r"add a batch axis, x\[None\]"):
    rsjax.certify(
      0, apply_fn, params, np.zeros((8, 8, 1), np.float32), sigma=0.25, num_classes=10, n0=10, n=100
    )


# ----------------------------------------------------------------------------- result files


def _write_rows(path, idx, run=None, resume=True):
  from rsjax.records import io

  with io.ResultsWriter(path, kind="certify", run=run, resume=resume) as w:
    for i in idx:
      w.write(idx=i, label=1, predict=1, radius=0.5, time=0.1)


def test_pandas_reads_files_with_a_run_record(tmp_path):
  pd = pytest.importorskip("pandas")
  from rsjax.records import io

  path = tmp_path / "o.tsv"
  _write_rows(path, [0, 1, 2], run={"N": 100, "sigma": 0.25})
  assert io.read_run_record(path) == {"N": 100, "sigma": 0.25}
  df = pd.read_csv(path, sep="\t")  # as Cohen et al.'s analyze.py reads it
  assert list(df.columns) == list(io.CERTIFY_COLUMNS) and len(df) == 3
  assert df["radius"].tolist() == [0.5] * 3


def test_mismatched_resume_names_the_differing_fields(tmp_path):
  from rsjax.records import io

  path = tmp_path / "o.tsv"
  run = {"N": 2000, "sigma": 0.25, "alpha": 0.001, "model": "abc"}
  _write_rows(path, [0, 1], run=run)
  _write_rows(path, [2], run=dict(run))  # the same run resumes
  with pytest.raises(
    io.RunMismatchError, match=r"N 2000 in the file, 500 now; alpha 0.001 .* 0.1 now"
  ) as e:
    _write_rows(path, [3], run=dict(run, N=500, alpha=0.1))
  assert "sigma" not in str(e.value) and "\n" not in str(e.value)
  assert list(io.read_certify(path).idx) == [0, 1, 2]  # untouched
  _write_rows(path, [7], run=dict(run, N=500), resume=False)  # overwrite starts over
  assert list(io.read_certify(path).idx) == [7]
  assert io.read_run_record(path)["N"] == 500
  (tmp_path / "o.tsv.run.json").unlink()  # rows of an unknown run are not resumed
  with pytest.raises(io.RunMismatchError, match="no run record"):
    _write_rows(path, [8], run=run)


@pytest.mark.parametrize(
  "row, needle",
  [
    (
      "55\tx\ty\tzz\tq\tw",
      r"line 4: label must be an integer in 0\.\.65535 \(ASCII digits.*\), got 'x'",
    ),
    ("55\t1\t1\t0.5\t1", r"line 4: 5 fields, expected 6"),
    ("1\t1\t1\t0.5\t1\t0.1", r"line 4: duplicate idx 1 \(also on line 3\)"),
    (
      "56\t1\t1\tnan\t1\t0.1",
      r"line 4: radius must be a finite number >= 0 in ASCII digits, got 'nan'",
    ),
  ],
)
def test_corrupted_rows_are_errors_naming_file_and_line(tmp_path, row, needle):
  from rsjax.records import io

  path = tmp_path / "o.tsv"
  _write_rows(path, [0, 1])
  with open(path, "a") as f:
    f.write(row + "\n2\t1\t1\t0.5\t1\t0.1\n")
  for read in (lambda: io.resume(path), lambda: io.read_certify(path)):
    with pytest.raises(ValueError, match="o.tsv' " + needle):
      read()


def test_only_an_incomplete_last_line_is_repaired(tmp_path):
  from rsjax.records import io

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

  from rsjax.records import io

  path = tmp_path / "o.tsv"
  with io.ResultsWriter(path, kind="certify") as w:
    w.write(idx=0, label=1, predict=1, radius=0.5, time=0.1)
    # A real second process (flock is per open file, so this also holds across processes).
    code = (
      "import sys; from rsjax.records import io\n"
      "try:\n  io.ResultsWriter(sys.argv[1], kind='certify')\n"
      "except io.ResultsLockedError as e:\n  print(e); sys.exit(3)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr
    assert "being written by another run" in proc.stdout
    with pytest.raises(io.ResultsLockedError):
      io.ResultsWriter(path, kind="certify", resume=False)  # not even overwrite
  assert list(io.read_certify(path).idx) == [0]
  _write_rows(path, [1])  # released on close


# ----------------------------------------------------------------------------- the rsjax command


def run_cli(*argv):
  from rsjax.app import cli

  return cli.main([str(a) for a in argv])


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
  out = tmp_path_factory.mktemp("faults") / "mlp"
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
      "1",
      "--batch",
      "64",
      "--out",
      out,
      "--quiet",
    )
    == 0
  )
  return out


FAST_PREDICT = ["--N", "200", "--batch", "200", "--quiet"]
FAST = FAST_PREDICT + ["--N0", "20"]


def _popen(*argv):
  import subprocess
  import sys

  return subprocess.Popen(
    [sys.executable, "-m", "rsjax"] + [str(a) for a in argv],
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )


def _wait_for_rows(proc, path, rows, timeout=1800):
  import time

  deadline = time.time() + timeout
  while time.time() < deadline and proc.poll() is None:
    if path.exists() and path.read_text().count("\n") > rows:
      return
    time.sleep(0.05)
  raise AssertionError(f"no {rows} rows before the run ended: {proc.communicate()[1][-2000:]}")


def _kill_9(proc):
  import os
  import signal

  os.kill(proc.pid, signal.SIGKILL)
  proc.wait()


@pytest.mark.parametrize("command", ["certify", "predict"])
def test_kill_9_and_a_concurrent_writer(model_dir, tmp_path, capsys, command):
  """A second writer is refused while the first runs; after kill -9 the run resumes
  and ends with exactly the rows of an uninterrupted run."""
  from rsjax.records import io

  args = [
    command,
    model_dir,
    None,
    "--N",
    "3000",
    "--batch",
    "500",
    "--max",
    "40",
    "--inputs-per-call",
    "1",
    "--seed",
    "4",
  ]
  full = tmp_path / "full.tsv"
  assert run_cli(*[full if a is None else a for a in args], "--quiet") == 0
  part = tmp_path / "part.tsv"
  proc = _popen(*[part if a is None else a for a in args], "--quiet")
  try:
    _wait_for_rows(proc, part, 3)
    capsys.readouterr()
    assert run_cli(*[part if a is None else a for a in args], "--quiet") == 2
    err = capsys.readouterr().err
    assert "being written by another run" in err and err.count("\n") == 1
  finally:
    _kill_9(proc)
  done = part.read_text().count("\n") - 1
  assert 0 < done < 40
  assert run_cli(*[part if a is None else a for a in args]) == 0
  assert f"resuming: {done} of 40 rows done" in capsys.readouterr().err
  a, b = io.read_results(full), io.read_results(part)
  np.testing.assert_array_equal(a.idx, b.idx)
  np.testing.assert_array_equal(a.predict, b.predict)
  if command == "certify":
    np.testing.assert_array_equal(a.radius, b.radius)


def test_kill_9_during_train_resumes(tmp_path):
  import json

  out = tmp_path / "m"
  args = [
    "train",
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--sigma",
    "0.25",
    "--epochs",
    "40",
    "--batch",
    "64",
    "--out",
    out,
  ]
  proc = _popen(*args, "--quiet")
  import time

  deadline = time.time() + 1800
  while time.time() < deadline and proc.poll() is None and not (out / "history.json").exists():
    time.sleep(0.05)
  assert proc.poll() is None, proc.communicate()[1][-2000:]
  _kill_9(proc)
  done = len(json.loads((out / "history.json").read_text()))
  assert 1 <= done < 40
  args[args.index("40")] = str(done + 1)
  proc = _popen(*args)
  text = "".join(proc.communicate(timeout=1800))
  assert proc.returncode == 0, text[-2000:]
  assert f"resuming {out} after epoch {done} of {done + 1} (a new workdir starts over)" in text
  assert len(json.loads((out / "history.json").read_text())) == done + 1


def test_mismatched_resume_and_overwrite(model_dir, tmp_path, capsys):
  out = tmp_path / "o.tsv"
  assert run_cli("certify", model_dir, out, *FAST, "--max", "4") == 0
  capsys.readouterr()
  assert (
    run_cli("certify", model_dir, out, *FAST, "--max", "4", "--sigma", "0.5", "--alpha", "0.1") == 2
  )
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "alpha 0.001 in the file, 0.1 now" in err
  assert "sigma 0.25 in the file, 0.5 now" in err and "--overwrite" in err
  # --method idrs on a plain file: the same one line, naming the method.
  assert (
    run_cli("certify", model_dir, out, *FAST, "--max", "4", "--method", "idrs", "--idrs-m", "1.5")
    == 2
  )
  assert "method 'cohen' in the file, 'idrs' now" in capsys.readouterr().err
  assert (
    run_cli("certify", model_dir, out, *FAST, "--max", "4", "--sigma", "0.5", "--overwrite") == 0
  )
  from rsjax.records import io

  assert io.read_run_record(out)["sigma"]["value"] == 0.5 and len(io.read_certify(out)) == 4


def test_max_is_an_index_bound_as_in_cohen(model_dir, tmp_path):
  from rsjax.records import io

  out = tmp_path / "o.tsv"
  assert run_cli("certify", model_dir, out, *FAST, "--skip", "5", "--max", "22") == 0
  assert list(io.read_certify(out).idx) == [0, 5, 10, 15, 20]


def _nan_model(model_dir, tmp_path):
  """A copy of ``model_dir`` whose latest checkpoint has NaN weights."""
  import shutil

  import jax

  from rsjax.models import to_train_fn
  from rsjax.models.checkpoint import Checkpoints

  bad = tmp_path / "nan_model"
  shutil.copytree(model_dir, bad)
  model, _ = rsjax.models.load_model(bad)
  _, params, rest = to_train_fn(model)
  params = jax.tree.map(lambda a: a * np.nan, params)
  with Checkpoints(bad / "checkpoints", max_to_keep=None) as ckpt:
    ckpt.save(ckpt.latest_step() + 1, items={"model": {"params": params, "rest": rest}})
  return bad


def test_nan_model_gets_no_certificate_from_the_cli(model_dir, tmp_path, capsys):
  bad = _nan_model(model_dir, tmp_path)
  for command in ("certify", "predict"):
    out = tmp_path / f"{command}.tsv"
    flags = FAST if command == "certify" else FAST_PREDICT
    assert run_cli(command, bad, out, *flags, "--start", "3", "--max", "5") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "NaN or inf logits" in err and "ids [3, 4]" in err
    assert out.read_text().count("\n") == 1  # the header, no row


@pytest.mark.parametrize(
  "case, needle",
  [
    ("directory", "a directory"),
    ("unwritable", "Permission denied"),
    ("full", "File too large"),
  ],
)
def test_unwritable_output_is_one_line(model_dir, tmp_path, case, needle):
  import os
  import resource
  import signal
  import subprocess
  import sys

  out = tmp_path / "o.tsv"
  preexec = None
  if case == "directory":
    out.mkdir()
  elif case == "unwritable":
    if os.geteuid() == 0:
      pytest.skip("root writes anywhere")
    (tmp_path / "ro").mkdir(mode=0o500)
    out = tmp_path / "ro" / "o.tsv"
  else:  # a full disk, as far as a user can make one: a file size limit (EFBIG)

    def preexec():
      signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
      resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))

  proc = subprocess.run(
    [sys.executable, "-m", "rsjax", "certify", str(model_dir), str(out), *FAST, "--max", "20"],
    capture_output=True,
    text=True,
    preexec_fn=preexec,
  )
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert proc.stderr.count("\n") == 1 and needle in proc.stderr, proc.stderr
  assert "Traceback" not in proc.stderr


def test_cli_mistakes_are_one_line(model_dir, tmp_path, capsys):
  import shutil

  from rsjax import models

  clean = tmp_path / "clean"
  shutil.copytree(model_dir, clean)
  cfg = models.read_config(clean)
  models.write_config(clean, dict(cfg, sigma=0.0))
  other = tmp_path / "other"
  shutil.copytree(model_dir, other)
  models.write_config(other, dict(cfg, model="cnn"))
  header_only = tmp_path / "h.tsv"
  header_only.write_text("idx\tlabel\tpredict\tradius\tcorrect\ttime\n")
  cases = [
    (
      ["certify", model_dir, tmp_path / "a.tsv", "--dataset", "mnist5k", *FAST],
      "model expects 8x8x1 inputs, mnist5k is 28x28x1",
    ),
    (["certify", clean, tmp_path / "b.tsv", *FAST], "trained without noise"),
    (
      ["certify", other, tmp_path / "c.tsv", *FAST],
      "holds a 'mlp' model, but its config.json says 'cnn'",
    ),
    (["analyze", header_only], "has a header but no rows"),
  ]
  for argv, needle in cases:
    assert run_cli(*argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
  with pytest.raises(SystemExit) as e:
    run_cli("certify", model_dir, tmp_path / "d.tsv", "--start", "-1")
  assert e.value.code == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "--start: must be >= 0" in err
  from rsjax.app import cli

  with pytest.raises(cli.CliError, match="has a header but no rows"):  # --debug: the exception
    run_cli("analyze", header_only, "--debug")


def test_help_version_and_predict_summary(model_dir, tmp_path, capsys):
  from rsjax import __version__
  from rsjax.app import cli

  with pytest.raises(SystemExit):
    run_cli("--version")
  assert capsys.readouterr().out.strip() == f"rsjax {__version__}"
  for command in ("train", "certify", "predict", "analyze", "verify", "audit", "demo"):
    sub = cli.build_parser()._subparsers._group_actions[0].choices[command]
    for action in sub._actions:
      if action.option_strings and action.dest != "help":
        assert action.help, f"{command} {action.option_strings} has no help"
  with pytest.raises(SystemExit):
    run_cli("certify", "--help")
  text = " ".join(capsys.readouterr().out.split())
  assert "--N N" in text and "(default: 100000)" in text and "Cohen et al.'s --max" in text
  assert run_cli("predict", model_dir, tmp_path / "p.tsv", *FAST_PREDICT, "--max", "10") == 0
  out = capsys.readouterr().out
  assert "10 inputs in" in out and "accuracy 0." in out and "abstained 0." in out


def test_analyze_title_steps_and_envelope_warning(model_dir, tmp_path, capsys):
  a, b = tmp_path / "a.tsv", tmp_path / "b.tsv"
  assert run_cli("certify", model_dir, a, *FAST, "--max", "6") == 0
  assert run_cli("certify", model_dir, b, *FAST, "--max", "3", "--sigma", "0.5") == 0
  capsys.readouterr()
  assert run_cli("analyze", a, b, "--plot", tmp_path / "c.png") == 0
  err = capsys.readouterr().err
  assert "envelope mixes files over different inputs (a.tsv: 6, b.tsv: 3; 3 in common)" in err
  from rsjax.app.cli import analyze
  from rsjax.records import io
  from rsjax.records.spec import RunSpec

  title = analyze.plot_title(
    [RunSpec.read(a), RunSpec.read(b)], {"a": io.read_certify(a), "b": io.read_certify(b)}
  )
  assert title == (
    "certified accuracy: sigma=0.25, 0.5; gaussian (l2); N=200; alpha=0.001; 6, 3 inputs"
  )


def test_step_curve_equals_certified_accuracy():
  from rsjax import metrics
  from rsjax.metrics import plots
  from rsjax.records import io

  res = io.CertifyResults(
    idx=np.arange(5),
    label=np.zeros(5, int),
    predict=np.array([0, 0, -1, 0, 1]),
    radius=np.array([0.3, 0.1, 0.0, 0.7, 0.5]),
    correct=np.array([1, 1, 0, 1, 0], bool),
    time=np.zeros(5),
  )
  x, y = plots._step_curve(res, 1.0)
  grid = np.linspace(0, 1, 101)
  step = y[np.searchsorted(x, grid, side="left").clip(1) - 1]  # value left of each breakpoint
  step[grid == 0] = y[0]
  np.testing.assert_allclose(
    step, metrics.certified_accuracy(res.correct, res.radius, grid, predict=res.predict)
  )


def test_srs_refuses_non_finite_logits(getkey):
  import dataclasses

  import jax.numpy as jnp

  from rsjax import models, srs

  @dataclasses.dataclass(frozen=True)
  class NanDEQ:
    """z = 0.5 z + x; logits [0, sum z], NaN where the first noisy pixel exceeds 0.9."""

    def __call__(self, params, x, z0, solver):
      u = x.reshape(x.shape[0], -1)
      res = models.solve(lambda z: 0.5 * z + u, jnp.zeros_like(u) if z0 is None else z0, solver)
      score = jnp.where(u[:, 0] > 0.9, jnp.nan, res.z.sum(-1) * params)
      return jnp.stack([jnp.zeros_like(score), score], axis=-1), res

  x = np.full((3, 4), 0.1, np.float32)
  x[1, 0] = 0.95
  kw = dict(
    sigma=0.01,
    num_classes=2,
    num=40,
    config=srs.SRSConfig(m=4),
    settings=rsjax.Sampling(batch_size=8),
    check_key=getkey(),
    ids=[4, 5, 6],
  )
  with pytest.raises(FloatingPointError, match=r"ids \[5\]"):
    srs.srs_sample(getkey(), NanDEQ(), jnp.float32(1.0), x, **kw)
  x[1, 0] = 0.5
  out = srs.srs_sample(getkey(), NanDEQ(), jnp.float32(1.0), x, **kw)
  assert out.counts.sum() == 3 * 40
