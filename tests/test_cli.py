"""The rsjax command: errors, train-resume, and certify surviving kill -9."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from rsjax.app import cli
from rsjax.records import io


def run_cli(*argv):
  return cli.main([str(a) for a in argv])


def test_train_writes_config_and_resumes(trained, capsys):
  import json

  hist = json.loads((trained / "history.json").read_text())
  assert [h["epoch"] for h in hist] == [1, 2]
  assert hist[-1]["clean_acc"] > 0.5
  # Asking for one more epoch resumes from epoch 2 instead of starting over.
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
      "3",
      "--batch",
      "64",
      "--lr",
      "0.1",
      "--out",
      trained,
      "--quiet",
    )
    == 0
  )
  hist = json.loads((trained / "history.json").read_text())
  assert [h["epoch"] for h in hist] == [1, 2, 3]
  assert "epoch 3" in capsys.readouterr().out


def test_certify_analyze_and_predict(trained, tmp_path, capsys):
  out = tmp_path / "c.tsv"
  assert (
    run_cli(
      "certify",
      trained,
      out,
      "--N",
      "500",
      "--N0",
      "50",
      "--skip",
      "30",
      "--batch",
      "500",
      "--quiet",
    )
    == 0
  )
  res = io.read_certify(out)
  assert len(res.idx) == 10 and list(res.idx) == list(range(0, 300, 30))
  assert np.mean(res.correct) > 0.5
  png = tmp_path / "curve.png"
  assert run_cli("analyze", out, "--radii", "0", "0.25", "--plot", png) == 0
  text = capsys.readouterr().out
  assert "r=0.25" in text and "ACR" in text
  assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  pout = tmp_path / "p.tsv"
  assert (
    run_cli("predict", trained, pout, "--N", "200", "--alpha", "0.01", "--max", "5", "--quiet") == 0
  )
  assert len(io.read_predict(pout).idx) == 5


def test_certify_grid_budgeted_and_analyze(trained, tmp_path, capsys):
  out = tmp_path / "b.tsv"
  assert (
    run_cli(
      "certify",
      trained,
      out,
      "--N",
      "4000",
      "--N0",
      "50",
      "--skip",
      "30",
      "--batch",
      "500",
      "--grid",
      "0,0.25,0.5",
      "--quiet",
    )
    == 0
  )
  res = io.read_certify(out)
  samples = res.extra["samples"]
  assert len(res.idx) == 10 and np.all((samples >= 1000) & (samples <= 4000))
  assert np.mean(res.correct) > 0.5
  assert run_cli("analyze", out, "--radii", "0", "0.25") == 0
  assert "samples mean" in capsys.readouterr().out
  assert run_cli("certify", trained, tmp_path / "m.tsv", "--grid", "0,0.5", "--multiclass") == 2


@pytest.mark.heavy
def test_certify_survives_kill_9(trained, tmp_path):
  args = [
    "certify",
    str(trained),
    None,
    "--N",
    "3000",
    "--N0",
    "50",
    "--batch",
    "500",
    "--max",
    "24",
    "--inputs-per-call",
    "1",
    "--seed",
    "5",
    "--quiet",
  ]
  full = tmp_path / "full.tsv"
  assert run_cli(*[a if a is not None else full for a in args]) == 0
  part = tmp_path / "part.tsv"
  cmd = [sys.executable, "-m", "rsjax"] + [a if a is not None else str(part) for a in args]
  env = dict(os.environ)
  proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  deadline = time.time() + 120
  rows = 0
  while time.time() < deadline and proc.poll() is None:
    if part.exists():
      rows = max(0, len(part.read_text().splitlines()) - 1)
      if rows >= 3:
        break
    time.sleep(0.05)
  assert proc.poll() is None, f"run ended before it could be killed: {proc.stderr.read()!r}"
  os.kill(proc.pid, signal.SIGKILL)
  proc.wait()
  done_before = len(io.read_certify(part).idx) if part.read_text().count("\n") > 1 else 0
  assert 0 < done_before < 24
  assert run_cli(*[a if a is not None else part for a in args]) == 0
  a, b = io.read_certify(full), io.read_certify(part)
  np.testing.assert_array_equal(a.idx, b.idx)
  np.testing.assert_array_equal(a.predict, b.predict)
  np.testing.assert_array_equal(a.radius, b.radius)
  assert len(set(b.idx.tolist())) == 24


@pytest.mark.parametrize(
  "argv, needle",
  [
    (["certify", "MISSING_DIR", "out.tsv"], "does not exist"),
    (
      ["train", "--dataset", "mnist", "--data-dir", "EMPTY", "--model", "lenet", "--out", "OUT"],
      "tfds build",
    ),
    (["train", "--dataset", "nosuchset", "--model", "mlp", "--out", "OUT"], "mnist5k"),
    (["train", "--dataset", "digits", "--model", "nosuchnet", "--out", "OUT"], "lenet"),
    (["analyze", "MISSING.tsv"], "does not exist"),
  ],
)
def test_errors_name_the_problem_and_the_fix(argv, needle, tmp_path, capsys):
  (tmp_path / "EMPTY").mkdir()
  argv = [
    str(tmp_path / a) if a.isupper() or a.endswith("_DIR") or a.startswith("MISSING") else a
    for a in argv
  ]
  assert run_cli(*argv) == 2
  assert needle in capsys.readouterr().err


@pytest.mark.parametrize(
  "flags, needle",
  [
    (["--N", "0"], "--N"),
    (["--alpha", "1.5"], "--alpha"),
    (["--sigma", "-0.5"], "--sigma"),
    (["--skip", "zero"], "--skip"),
    (["--batch", "-3"], "--batch"),
    (["--noise", "cauchy"], "--noise"),
    (["--grid", "0.5,0.25"], "--grid"),
  ],
)
def test_bad_flags(flags, needle, capsys):
  with pytest.raises(SystemExit) as e:
    run_cli("certify", "model", "out.tsv", *flags)
  assert e.value.code == 2
  assert needle in capsys.readouterr().err


@pytest.mark.heavy
@pytest.mark.parametrize("how", ["flags", "slurm"])
def test_certify_across_two_processes_matches_one(trained, tmp_path, how):
  # Two processes join through --coordinator and its flags, or with no flag from a simulated
  # SLURM step (srun's variables, as JAX detects them).
  from test_multihost import CLUSTER_PORTS, LAUNCH_VARS, _free_port, cluster_env

  args = [
    "certify",
    str(trained),
    None,
    "--N",
    "400",
    "--N0",
    "50",
    "--batch",
    "400",
    "--skip",
    "25",
    "--seed",
    "3",
    "--quiet",
  ]
  single = tmp_path / "single.tsv"
  assert run_cli(*[a if a is not None else single for a in args]) == 0
  multi = tmp_path / "multi.tsv"
  env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
  env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2")
  for _ in range(2):  # a free port may be taken between choosing and binding it
    port = _free_port(0 if how == "flags" else CLUSTER_PORTS)

    def flags(i, port=port):
      return (
        ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i)]
        if how == "flags"
        else []
      )

    procs = [
      subprocess.Popen(
        [sys.executable, "-m", "rsjax"]
        + [a if a is not None else str(multi) for a in args]
        + flags(i),
        env=env if how == "flags" else {**env, **cluster_env(how, port, i)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
      )
      for i in range(2)
    ]
    outs = []
    for p in procs:
      try:
        outs.append((p.wait(timeout=1800), p.stdout.read(), p.stderr.read()))
      except subprocess.TimeoutExpired:
        for q in procs:
          q.kill()
        pytest.fail("two-process certify timed out")
    if all(rc == 0 for rc, _, _ in outs):
      break
  for rc, _, err in outs:
    assert rc == 0, err[-3000:]
  through = "the coordinator given" if how == "flags" else "the SLURM job"
  for i, (_, out, _) in enumerate(outs):  # each process says how it joined, and who did
    assert f"rsjax certify: process {i} of 2 " in out and through in out, out
    assert "processes 0, 1 hold 4 devices" in out, out
  assert "process 1 of 2" in outs[1][1]
  a, b = io.read_certify(single), io.read_certify(multi)
  np.testing.assert_array_equal(a.idx, b.idx)
  np.testing.assert_array_equal(a.predict, b.predict)
  np.testing.assert_array_equal(a.radius, b.radius)
  np.testing.assert_array_equal(a.correct, b.correct)
  # The merged file is one run: the same record, and it verifies.
  from rsjax import verify
  from rsjax.records.spec import RunSpec

  assert RunSpec.read(multi).identity() == RunSpec.read(single).identity()
  assert verify.verify(multi).ok


def test_certify_idrs_method(trained, tmp_path):
  out = tmp_path / "idrs.tsv"
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
      "--N",
      "300",
      "--N0",
      "30",
      "--batch",
      "300",
      "--skip",
      "60",
      "--quiet",
    )
    == 0
  )
  res = io.read_certify(out)
  assert len(res.idx) == 5
  header = out.read_text().splitlines()[0].split("\t")
  assert header[-1] == "sigma"
  sig = np.array([float(line.split("\t")[-1]) for line in out.read_text().splitlines()[1:]])
  assert np.all(sig > 0) and np.ptp(sig) > 0  # sigma really depends on the input
  # No default m for 'digits': the error says which flag to set.
  assert (
    run_cli(
      "certify",
      trained,
      tmp_path / "x.tsv",
      "--method",
      "idrs",
      "--idrs-rate",
      "0.05",
      "--N",
      "100",
      "--max",
      "1",
      "--quiet",
    )
    == 2
  )


@pytest.mark.heavy
def test_train_and_certify_a_deq_standard_and_srs(tmp_path):
  out = tmp_path / "deq"
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
  common = ["--N", "300", "--N0", "30", "--max", "3", "--quiet"]
  assert (
    run_cli(
      "certify",
      out,
      tmp_path / "srs.tsv",
      "--method",
      "srs",
      "--srs-m",
      "60",
      "--batch",
      "100",
      *common,
    )
    == 0
  )
  assert (
    run_cli(
      "certify", out, tmp_path / "std.tsv", "--method", "deq-standard", "--batch", "300", *common
    )
    == 0
  )
  srs, std = io.read_certify(tmp_path / "srs.tsv"), io.read_certify(tmp_path / "std.tsv")
  assert len(srs.idx) == len(std.idx) == 3
  assert np.all(srs.radius >= 0) and np.all(std.radius >= 0)
  assert np.mean(std.correct) > 0  # the DEQ learned something in one epoch
  # The library rebuilds the DEQ from its workdir too (the model registry knows "deq").
  from rsjax import models

  model, config = models.load_model(out)
  assert isinstance(model, models.DEQClassifier) and config["model"] == "deq"
  # A non-DEQ model refuses the DEQ methods with a clear error.
  assert run_cli("certify", tmp_path / "nomodel", tmp_path / "x.tsv", "--method", "srs") == 2


def test_certify_ucan_pattern_and_dataset_wise_sigma(trained, tmp_path, capsys):
  from rsjax import ucan

  common = ["--N", "400", "--N0", "40", "--batch", "400", "--skip", "60", "--quiet"]
  out = tmp_path / "ucan.tsv"
  assert (
    run_cli(
      "certify",
      trained,
      out,
      "--method",
      "ucan",
      "--ucan-pattern",
      "linf",
      "--ucan-kappa",
      "0.5",
      "--sigma",
      "0.3",
      *common,
    )
    == 0
  )
  printed = capsys.readouterr().out
  assert "pattern-wise" in printed and "guarantee:" in printed and "UCAN Thm 3.2" in printed
  res = io.read_certify(out)
  assert len(res.idx) == 5 and list(res.extra) == ["normalized_radius", "alm", "sound"]
  sigma = 0.3 * ucan.pattern_sigma((8, 8, 1), pattern="linf", kappa=0.5)
  # radius is the sound isotropic ball min(sigma) * R; alm = geometric mean(sigma) * R.
  r = res.extra["normalized_radius"]
  np.testing.assert_allclose(res.radius, sigma.min() * r, rtol=1e-12)
  np.testing.assert_allclose(res.extra["alm"], np.exp(np.mean(np.log(sigma))) * r, rtol=1e-6)
  assert np.all(res.extra["sound"] == 1) and np.any(res.radius > 0)
  # A frozen dataset-wise (mu, sigma) saved in the workdir takes precedence.
  rng = np.random.default_rng(0)
  wd = tmp_path / "wd"
  import shutil

  shutil.copytree(trained, wd)
  dsig = rng.uniform(0.1, 0.4, (8, 8, 1)).astype(np.float32)
  ucan.save_universal_noise(wd, mu=np.zeros((8, 8, 1)), sigma=dsig)
  out2 = tmp_path / "ucan_ds.tsv"
  assert run_cli("certify", wd, out2, "--method", "ucan", *common) == 0
  assert "dataset-wise" in capsys.readouterr().out
  res2 = io.read_certify(out2)
  np.testing.assert_allclose(res2.radius, dsig.min() * res2.extra["normalized_radius"], rtol=1e-6)
  # analyze reads the rows back and reports the extra columns.
  assert run_cli("analyze", out, out2, "--radii", "0", "0.1") == 0
  text = capsys.readouterr().out
  assert "r=0.1" in text and "alm: mean" in text and "sound=1 on all 5 rows" in text
  # dataset-wise without a saved noise: one clear error.
  assert (
    run_cli(
      "certify", trained, tmp_path / "x.tsv", "--method", "ucan", "--ucan-sigma", "dataset", *common
    )
    == 2
  )
  assert ucan.NOISE_FILE in capsys.readouterr().err


def _balls_of_other_classes_disjoint(x, predict, radius):
  flat = x.reshape(len(x), -1).astype(np.float64)
  for i in range(len(x)):
    for j in range(i):
      if predict[i] >= 0 and predict[j] >= 0 and predict[i] != predict[j]:
        assert np.linalg.norm(flat[i] - flat[j]) >= radius[i] + radius[j]


def test_certify_ddrs_memory_guarantee_and_resume(trained, tmp_path, capsys):
  from rsjax import data

  common = [
    "--method",
    "ddrs",
    "--ddrs-steps",
    "10",
    "--ddrs-lr",
    "0.01",
    "--N",
    "300",
    "--N0",
    "30",
    "--batch",
    "300",
    "--skip",
    "40",
    "--max",
    "320",
    "--inputs-per-call",
    "1",
    "--quiet",
  ]
  full = tmp_path / "ddrs.tsv"
  assert run_cli("certify", trained, full, *common) == 0
  assert "DDRS memory-based guarantee" in capsys.readouterr().out
  res = io.read_certify(full)
  assert list(res.extra) == ["sigma", "predict_mc", "radius_mc", "sound"]
  sig = res.extra["sigma"]
  assert np.all(sig > 0) and np.ptp(sig) > 0 and np.any(sig != 0.25)  # optimized per input
  assert np.all(res.extra["sound"] == 1)
  x, _ = data.load("digits", "test").get_batch(res.idx)
  _balls_of_other_classes_disjoint(np.asarray(x), res.predict, res.radius)
  # A run cut after 3 rows resumes with the memory rebuilt from them: same rows.
  part = tmp_path / "part.tsv"
  lines = full.read_text().splitlines(keepends=True)
  part.write_text("".join(lines[: len(lines) - 5]))
  import shutil

  shutil.copy(io.run_record_path(full), io.run_record_path(part))  # same run
  assert run_cli("certify", trained, part, *common) == 0
  again = io.read_certify(part)
  np.testing.assert_array_equal(again.predict, res.predict)
  np.testing.assert_array_equal(again.radius, res.radius)
  # Without the memory the output says it is not a certificate, and analyze reports it.
  off = tmp_path / "off.tsv"
  assert run_cli("certify", trained, off, *common, "--ddrs-memory", "off") == 0
  assert "NOT A CERTIFICATE" in capsys.readouterr().out
  res_off = io.read_certify(off)
  assert np.all(res_off.extra["sound"] == 0)
  # Without the memory the radius is the Monte Carlo one (another claim: other noise, so
  # not the memory run's radius_mc).
  np.testing.assert_array_equal(res_off.radius, res_off.extra["radius_mc"])
  assert run_cli("analyze", full, off) == 0
  text = capsys.readouterr().out
  assert "sound=0 (NOT a certificate) on 8 of 8 rows" in text and "sigma: mean" in text


@pytest.mark.heavy
def test_train_and_certify_ddrs(tmp_path, capsys):
  out = tmp_path / "ddrs"
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
      "--out",
      out,
      "--method",
      "ddrs",
      "--sigma-steps",
      "1",
      "--sigma-lr",
      "0.02",
      "--sigma-draws",
      "2",
      "--objective",
      "macer",
      "--num-noise",
      "2",
      "--quiet",
    )
    == 0
  )
  assert "training sigma" in capsys.readouterr().out
  import json

  saved = json.loads((out / "config.json").read_text())
  assert saved["method"] == "ddrs" and saved["train"]["objective"]["name"] == "macer"
  assert saved["train"]["batch_sigma"]["sigma_steps"] == 1  # DDRS Algorithm 2 with MACER
  res_file = tmp_path / "ddrs.tsv"
  assert (
    run_cli(
      "certify",
      out,
      res_file,
      "--method",
      "ddrs",
      "--ddrs-steps",
      "10",
      "--ddrs-lr",
      "0.01",
      "--ddrs-draws",
      "4",
      "--N",
      "300",
      "--N0",
      "30",
      "--batch",
      "300",
      "--max",
      "4",
      "--quiet",
    )
    == 0
  )
  text = capsys.readouterr().out
  assert "memory-based" in text
  res = io.read_certify(res_file)
  assert len(res.idx) == 4
  assert set(res.extra) >= {"sigma", "predict_mc", "radius_mc"}
  assert np.all(res.extra["sigma"] > 0)
  assert run_cli("analyze", res_file) == 0


@pytest.mark.heavy
def test_train_and_certify_ucan(trained, tmp_path, capsys):
  out = tmp_path / "ucan"
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
      "--lr",
      "0.01",
      "--out",
      out,
      "--method",
      "ucan",
      "--generator",
      "universal",
      "--init",
      trained,
      "--ucan-draws",
      "2",
      "--quiet",
    )
    == 0
  )
  assert (out / "ucan_noise.npz").exists()
  res_file = tmp_path / "ucan.tsv"
  assert (
    run_cli(
      "certify",
      out,
      res_file,
      "--method",
      "ucan",
      "--ucan-sigma",
      "dataset",
      "--N",
      "300",
      "--N0",
      "30",
      "--batch",
      "300",
      "--max",
      "4",
      "--quiet",
    )
    == 0
  )
  res = io.read_certify(res_file)
  assert len(res.idx) == 4 and np.all(res.extra["sound"] == 1)
  assert np.all(res.extra["alm"] >= res.radius)
  capsys.readouterr()
  assert run_cli("analyze", res_file, "--radius-column", "alm") == 0
  assert "ACR" in capsys.readouterr().out
  # the unsound input-dependent generator is refused with the reason, and trains with the opt-in
  unsound = [
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
    "--lr",
    "0.01",
    "--out",
    tmp_path / "x",
    "--method",
    "ucan",
    "--generator",
    "input",
    "--init",
    trained,
    "--ucan-draws",
    "1",
    "--quiet",
  ]
  assert run_cli(*unsound) == 2
  assert "not sound" in capsys.readouterr().err
  assert run_cli(*unsound, "--allow-unsound") == 0
  assert "NOT SOUND" in capsys.readouterr().out
  import json

  assert json.loads((tmp_path / "x" / "config.json").read_text())["sound"] is False
  # certify refuses its workdir unless the noise is chosen explicitly (pattern-wise noise is sound)
  capsys.readouterr()
  assert (
    run_cli(
      "certify",
      tmp_path / "x",
      tmp_path / "x.tsv",
      "--method",
      "ucan",
      "--N",
      "100",
      "--N0",
      "10",
      "--max",
      "1",
      "--quiet",
    )
    == 2
  )
  assert "input-dependent" in capsys.readouterr().err
