"""``rsjax train-denoiser`` and ``rsjax certify --denoiser``: a denoiser + classifier pair from
files, on the 8x8 digits (tiny models, one epoch: the plumbing, not accuracy)."""

import json

import numpy as np
import pytest

from rsjax.app import cli
from rsjax.models.denoise import workdir
from rsjax.records import io


def run_cli(*argv):
  return cli.main([str(a) for a in argv])


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
  root = tmp_path_factory.mktemp("denoise_cli")
  clf, mse, stab, ddpm = (root / n for n in ("clf", "mse", "stab", "ddpm"))
  assert (
    run_cli(
      "train",
      "--dataset",
      "digits",
      "--model",
      "mlp",
      "--sigma",
      "0",
      "--epochs",
      1,
      "--batch",
      64,
      "--lr",
      0.1,
      "--out",
      clf,
      "--quiet",
    )
    == 0
  )
  assert (
    run_cli(
      "train-denoiser",
      "--dataset",
      "digits",
      "--objective",
      "mse",
      "--sigma",
      0.25,
      "--depth",
      3,
      "--features",
      8,
      "--epochs",
      1,
      "--out",
      mse,
      "--quiet",
    )
    == 0
  )
  assert (
    run_cli(
      "train-denoiser",
      "--dataset",
      "digits",
      "--objective",
      "stability",
      "--sigma",
      0.25,
      "--classifier",
      clf,
      "--init",
      mse,
      "--epochs",
      1,
      "--lr",
      1e-4,
      "--out",
      stab,
      "--quiet",
    )
    == 0
  )
  assert (
    run_cli(
      "train-denoiser",
      "--dataset",
      "digits",
      "--objective",
      "ddpm",
      "--unet-channels",
      8,
      16,
      "--norm-groups",
      4,
      "--epochs",
      1,
      "--batch",
      128,
      "--out",
      ddpm,
      "--quiet",
    )
    == 0
  )
  return clf, mse, stab, ddpm


@pytest.mark.heavy
def test_denoiser_directories(dirs):
  _, mse, stab, ddpm = dirs
  for d, kind, objective in (
    (mse, "dncnn", "mse"),
    (stab, "dncnn", "stability"),
    (ddpm, "ddpm", "ddpm"),
  ):
    config = json.loads((d / workdir.DENOISER_FILE).read_text())
    assert config["kind"] == kind and config["objective"] == objective
    assert len(config["history"]) == 1 and np.isfinite(config["history"][0]["loss"])
  model, config = workdir.load_denoiser(stab)
  assert config["init"] == str(mse) and config["model_kwargs"]["depth"] == 3
  _, _, c = workdir.denoiser_fn(ddpm, sigma=0.5)
  assert c["timestep"] == 259


@pytest.mark.heavy
@pytest.mark.parametrize("which", [1, 2, 3])
def test_certify_with_denoiser(dirs, tmp_path, capsys, which):
  clf, den = dirs[0], dirs[which]
  out = tmp_path / "cert.tsv"
  assert (
    run_cli(
      "certify",
      clf,
      out,
      "--denoiser",
      den,
      "--sigma",
      0.25,
      "--N0",
      10,
      "--N",
      50,
      "--batch",
      50,
      "--max",
      6,
      "--quiet",
    )
    == 0
  )
  res = io.read_certify(out)
  assert len(res) == 6 and np.all(res.radius >= 0)
  run = json.loads(out.with_name(out.name + ".run.json").read_text())
  assert json.dumps(run).count(str(den)) >= 1
  # The same run resumes; the same file with another denoiser is another run.
  assert (
    run_cli(
      "certify",
      clf,
      out,
      "--denoiser",
      den,
      "--sigma",
      0.25,
      "--N0",
      10,
      "--N",
      50,
      "--batch",
      50,
      "--max",
      6,
      "--quiet",
    )
    == 0
  )
  assert (
    run_cli(
      "certify",
      clf,
      out,
      "--sigma",
      0.25,
      "--N0",
      10,
      "--N",
      50,
      "--batch",
      50,
      "--max",
      6,
      "--quiet",
    )
    == 2
  )
  assert "denoiser" in capsys.readouterr().err
  if which == 1:  # an honest denoised run verifies and passes its audit (the denoiser recorded)
    from rsjax import verify
    from rsjax.app import audit

    assert verify.verify(out).ok
    report = audit.audit(out, model_dir=clf, rows=2)
    assert report.ok, report.reason


def test_cli_errors_are_one_line(dirs, tmp_path, capsys):
  clf = dirs[0]
  assert (
    run_cli(
      "certify",
      clf,
      tmp_path / "x.tsv",
      "--denoiser",
      tmp_path / "none",
      "--sigma",
      0.25,
      "--N",
      10,
      "--N0",
      5,
      "--quiet",
    )
    == 2
  )
  err = capsys.readouterr().err
  assert "--denoiser" in err and "not a denoiser directory" in err and len(err.splitlines()) == 1
  assert (
    run_cli(
      "train-denoiser",
      "--dataset",
      "digits",
      "--objective",
      "stability",
      "--sigma",
      0.25,
      "--out",
      tmp_path / "s",
    )
    == 2
  )
  assert "needs --classifier" in capsys.readouterr().err
  assert (
    run_cli("train-denoiser", "--dataset", "digits", "--objective", "mse", "--out", tmp_path / "s")
    == 2
  )
  assert "needs --sigma" in capsys.readouterr().err


def test_certify_from_an_array_file_equals_the_registry_dataset(dirs, tmp_path, monkeypatch):
  from rsjax import data
  from rsjax.engine import batch_timing

  sizes = []
  auto = batch_timing.auto_batch_size
  monkeypatch.setattr(
    batch_timing, "auto_batch_size", lambda *a, **k: sizes.append(auto(*a, **k)) or sizes[-1]
  )

  clf, mse = dirs[0], dirs[1]
  x, y = data.load("digits", "test").arrays()
  npz = tmp_path / "digits_test.npz"
  np.savez(npz, x=x[:5], y=y[:5], num_classes=10)
  # The file's inputs are the registry's, bit for bit. The dataset is part of the claim the
  # run's key binds (rsjax-run/3), so the two draw other noise: the file's run is compared with
  # itself at another step size instead.
  file_x, file_y = data.load(str(npz), "test").arrays()
  np.testing.assert_array_equal(file_x, x[:5])
  np.testing.assert_array_equal(file_y, y[:5])
  outs = []
  # The first run's step size is automatic (the default with --denoiser): counts are the same.
  for name, batch in (("a.tsv", ()), ("b.tsv", ("--batch", 50))):
    out = tmp_path / name
    argv = ("certify", clf, out, "--dataset", npz, "--denoiser", mse, "--sigma", 0.25, *batch)
    assert run_cli(*argv, "--N0", 10, "--N", 50, "--max", 5, "--quiet") == 0
    outs.append(io.read_certify(out))
  a, b = outs
  assert len(sizes) >= 1 and all(s >= 1 for s in sizes)  # run a's step was measured
  assert len(a) == len(b) == 5
  np.testing.assert_array_equal(a.label, y[:5])
  np.testing.assert_array_equal(a.predict, b.predict)
  np.testing.assert_array_equal(a.radius, b.radius)
  bad = tmp_path / "bad.npz"
  np.savez(bad, images=x[:2] * 3, labels=y[:2])
  argv = ("certify", clf, tmp_path / "c.tsv", "--dataset", bad, "--sigma", 0.25, "--quiet")
  assert run_cli(*argv) != 0
  with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
    data.load(str(bad), "test")
  np.savez(bad, images=(x[:2] * 255).astype(np.uint8), labels=y[:2])
  ds = data.load(str(bad), "test")
  assert ds.num_classes == int(y[:2].max()) + 1 and ds.input_shape == x.shape[1:]
  np.savez(bad, pixels=x[:2], labels=y[:2])
  with pytest.raises(ValueError, match="needs images"):
    data.load(str(bad), "test")


def test_certify_with_a_resize_stage(dirs, tmp_path):
  from rsjax import data

  clf, mse = dirs[0], dirs[1]
  x, y = data.load("digits", "test").arrays()
  big = np.repeat(np.repeat(x[:3], 2, axis=1), 2, axis=2)  # 16 x 16 digits
  npz = tmp_path / "big.npz"
  np.savez(npz, x=big, y=y[:3], num_classes=10)
  out = tmp_path / "r.tsv"
  argv = ("certify", clf, out, "--dataset", npz, "--sigma", 0.25, "--N0", 10, "--N", 50)
  assert run_cli(*argv, "--quiet") != 0  # 16 x 16 inputs, an 8 x 8 model
  assert run_cli(*argv, "--resize", "8x8", "--quiet") == 0
  assert len(io.read_certify(out)) == 3
  run = json.loads(out.with_name(out.name + ".run.json").read_text())
  assert "8x8" in json.dumps(run)
  assert run_cli(*argv, "--resize", "8x9", "--quiet") != 0  # another classifier: not a resume
  # Denoiser (fully convolutional, at 16 x 16), then the resize, then the classifier.
  argv = ("certify", clf, tmp_path / "d.tsv", "--dataset", npz, "--sigma", 0.25, "--N", 50)
  assert run_cli(*argv, "--N0", 10, "--denoiser", mse, "--resize", 8, "--quiet") == 0


def _certify_denoised(clf, den, out):
  argv = ("certify", clf, out, "--denoiser", den, "--sigma", 0.25, "--N0", 10, "--N", 50)
  assert run_cli(*argv, "--batch", 50, "--max", 4, "--quiet") == 0
  return json.loads(out.with_name(out.name + ".run.json").read_text())


@pytest.mark.heavy
def test_a_denoisers_settings_are_bound_and_audited(dirs, tmp_path):
  """Red team 5: the same DDPM weights with another schedule or clipping denoise otherwise;
  the record binds the settings' digest and the audit compares it."""
  import shutil

  from rsjax.app import audit

  clf, ddpm = dirs[0], dirs[3]
  edited = tmp_path / "edited"
  shutil.copytree(ddpm, edited)
  config_file = edited / workdir.DENOISER_FILE
  config = json.loads(config_file.read_text())
  config_file.write_text(json.dumps({**config, "schedule": {"beta_end": 0.05}, "clip": False}))
  honest = _certify_denoised(clf, ddpm, tmp_path / "a.tsv")
  forged = _certify_denoised(clf, edited, tmp_path / "b.tsv")
  assert honest["model"]["fingerprint"] == forged["model"]["fingerprint"]  # the same weights
  assert honest["model"]["denoiser_config"] != forged["model"]["denoiser_config"]
  assert audit.audit(tmp_path / "a.tsv", model_dir=clf, rows=2).ok
  # audited against the honest denoiser, the edited settings are named before any draw
  report = audit.audit(tmp_path / "b.tsv", model_dir=clf, rows=2, denoiser=ddpm)
  assert not report.ok and "denoiser's settings" in report.reason, report.reason
  # settings edited after the run: the run's own denoiser no longer passes
  config_file.write_text(json.dumps(config))
  report = audit.audit(tmp_path / "b.tsv", model_dir=clf, rows=2)
  assert not report.ok and "denoiser's settings" in report.reason, report.reason
