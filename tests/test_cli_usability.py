"""What a new user meets on the command line: defaults that fit the dataset, one meaning per
flag, errors in the command's words that name their file, bad combinations refused before
anything is written (issue 26, points 4, 6, 7, 8)."""

import os

import pytest

from rsjax import models
from rsjax.app import cli
from rsjax.records import io

_TRAIN = ["train", "--dataset", "digits", "--model", "mlp", "--epochs", "1", "--quiet"]
_CERT = ["--N0", "10", "--N", "40", "--batch", "40", "--max", "2", "--quiet"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
  out = str(tmp_path_factory.mktemp("usability") / "mlp")
  assert cli.main([*_TRAIN, "--out", out]) == 0
  return out


def test_training_defaults_follow_the_dataset_and_are_printed(model_dir, capsys):
  train = models.read_config(model_dir)["train"]
  assert (train["epochs"], train["batch_size"], train["lr"], train["lr_step"]) == (1, 64, 0.05, 8)
  out = str(os.path.join(os.path.dirname(model_dir), "again"))
  assert cli.main([*_TRAIN, "--out", out]) == 0
  printed = capsys.readouterr().out
  assert (
    "training schedule: epochs 1, batch 64, lr 0.05, lr-step-size 8 (given: --epochs; "
    "defaults for digits: epochs 20, batch 64, lr 0.05, lr-step-size 8"
  ) in printed


def test_certify_warns_when_training_did_not_finish(model_dir, tmp_path, capsys):
  cut = str(tmp_path / "cut")
  assert cli.main([*_TRAIN, "--out", cut]) == 0
  config = models.read_config(cut)
  config["train"]["epochs"] = 3  # as written by a run of 3 epochs killed after the first
  models.write_config(cut, config)
  capsys.readouterr()
  assert cli.main(["certify", cut, str(tmp_path / "c.tsv"), *_CERT]) == 0
  err = capsys.readouterr().err
  assert "rsjax certify: warning: the model in" in err and "finished 1 of its 3 training" in err
  assert cli.main(["certify", model_dir, str(tmp_path / "d.tsv"), *_CERT]) == 0
  assert "warning" not in capsys.readouterr().err


def test_restart_means_start_over_in_train_and_certify(model_dir, tmp_path, capsys):
  out = str(tmp_path / "m")
  assert cli.main([*_TRAIN, "--out", out]) == 0
  capsys.readouterr()
  # Other settings in the same OUT: resume refuses, in CLI words (no Python keywords).
  assert cli.main([*_TRAIN, "--out", out, "--lr", "0.2"]) == 2
  err = capsys.readouterr().err
  assert "lr: saved 0.05 vs now 0.2" in err and "--overwrite (start over)" in err
  assert "resume=" not in err and err.count("\n") == 1
  for flag in ("--restart", "--overwrite"):  # one meaning: start over
    assert cli.main([*_TRAIN, "--out", out, "--lr", "0.2", flag]) == 0
    assert "starting over: removed the earlier training run" in capsys.readouterr().out
    assert models.read_config(out)["train"]["lr"] == 0.2
  rows = str(tmp_path / "rows.tsv")
  assert cli.main(["certify", model_dir, rows, *_CERT]) == 0
  assert cli.main(["certify", model_dir, rows, *_CERT, "--sigma", "0.5"]) == 2
  assert "sigma 0.25 in the file, 0.5 now" in capsys.readouterr().err
  assert cli.main(["certify", model_dir, rows, *_CERT, "--sigma", "0.5", "--restart"]) == 0
  assert io.read_run_record(rows)["sigma"]["value"] == 0.5


def test_a_mismatch_names_only_the_fields_that_differ(model_dir, tmp_path, capsys):
  rows = str(tmp_path / "rows.tsv")
  assert cli.main(["certify", model_dir, rows, *_CERT]) == 0
  record = io.read_run_record(rows)
  assert set(record["method"]["options"]) == {
    "grid",
    "budget_rule",
  }  # not the other methods' options
  capsys.readouterr()
  assert cli.main(["certify", model_dir, rows, *_CERT[:3], "80", *_CERT[4:]]) == 2
  err = capsys.readouterr().err
  assert "holds another run (n 40 in the file, 80 now)" in err
  # A record of an earlier version (flags at the top, a certificate entry) is refused in one
  # line, not misread.
  io.write_run_record(
    rows, {"N": 40, "sigma": 0.25, "certificate": {"format": "rsjax-certificate/1"}}
  )
  assert cli.main(["certify", model_dir, rows, *_CERT]) == 2
  err = capsys.readouterr().err.strip()
  assert "\n" not in err and "older rsjax" in err


def test_errors_name_their_file_and_hide_internals(model_dir, tmp_path, capsys):
  import shutil

  bad = str(tmp_path / "bad_json")
  shutil.copytree(model_dir, bad)
  with open(os.path.join(bad, models.CONFIG_FILE), "w") as f:
    f.write("{not json")
  assert cli.main(["certify", bad, str(tmp_path / "x.tsv"), *_CERT]) == 2
  err = capsys.readouterr().err
  assert f"{os.path.join(bad, models.CONFIG_FILE)!r} is not valid JSON" in err
  damaged = str(tmp_path / "damaged")
  shutil.copytree(model_dir, damaged)
  for root, _, files in os.walk(os.path.join(damaged, models.CHECKPOINT_DIR)):
    for name in files:
      if os.sep + "d" in root:  # the array data files
        with open(os.path.join(root, name), "wb") as f:
          f.write(b"garbage")
  assert cli.main(["certify", damaged, str(tmp_path / "y.tsv"), *_CERT]) == 2
  err = capsys.readouterr().err
  assert "cannot be read: a file in it is damaged or missing" in err
  assert "TensorStore" not in err and "tensorstore" not in err and err.count("\n") == 1
  record = str(tmp_path / "r.tsv")
  assert cli.main(["certify", model_dir, record, *_CERT]) == 0
  with open(io.run_record_path(record), "w") as f:
    f.write("{")
  capsys.readouterr()
  assert cli.main(["certify", model_dir, record, *_CERT]) == 2
  assert f"run record {io.run_record_path(record)!r} is not valid JSON" in capsys.readouterr().err


@pytest.mark.parametrize(
  "flags, message",
  [
    (["--N0", "100", "--N", "50"], "--N 50 is smaller than --N0 100"),
    (
      ["--multiclass", "--noise", "laplace"],
      "--multiclass (Cohen et al.'s multiclass L2 radius) "
      "works with Gaussian noise only, not --noise laplace",
    ),
    (
      ["--method", "idrs", "--multiclass"],
      "--method idrs gives the binary radius only, not --multiclass",
    ),
  ],
)
def test_bad_combinations_are_refused_before_anything_is_written(
  model_dir, tmp_path, capsys, flags, message
):
  out = str(tmp_path / "sub" / "rows.tsv")
  assert cli.main(["certify", model_dir, out, "--max", "2", "--quiet", *flags]) == 2
  err = capsys.readouterr().err
  assert message in err and err.count("\n") == 1
  assert not os.path.exists(out) and not os.path.exists(io.run_record_path(out))


def test_compilation_cache_is_on_by_default_in_a_user_cache_directory():
  home = os.path.expanduser("~")
  assert cli.compilation_cache_dir(None, {}) == os.path.join(home, ".cache", "rsjax", "jax")
  assert cli.compilation_cache_dir(None, {"XDG_CACHE_HOME": "/c"}) == "/c/rsjax/jax"
  assert cli.compilation_cache_dir(None, {"RSJAX_COMPILATION_CACHE": "/d"}) == "/d"
  assert cli.compilation_cache_dir("/e", {"RSJAX_COMPILATION_CACHE": "/d"}) == "/e"
  for off in ("off", "none", "OFF"):
    assert cli.compilation_cache_dir(off, {}) is None
    assert cli.compilation_cache_dir(None, {"RSJAX_COMPILATION_CACHE": off}) is None
  assert cli.compilation_cache_dir(None, {"JAX_COMPILATION_CACHE_DIR": "/j"}) is None  # JAX's own


def test_analyze_reads_cohen_three_digit_radii_and_full_precision(tmp_path, capsys):
  cohen = tmp_path / "cohen.tsv"
  cohen.write_text(
    "idx\tlabel\tpredict\tradius\tcorrect\ttime\n"
    "0\t7\t7\t0.571\t1\t0:00:01.234567\n1\t2\t-1\t0.0\t0\t0:00:01.000000\n"
  )
  full = tmp_path / "full.tsv"
  full.write_text(
    "idx\tlabel\tpredict\tradius\tcorrect\ttime\n"
    "0\t7\t7\t0.5712846112251282\t1\t1.234567\n1\t2\t-1\t0.0\t0\t1.0\n"
  )
  a, b = io.read_certify(cohen), io.read_certify(full)
  assert a.radius[0] == 0.571 and b.radius[0] == 0.5712846112251282
  assert cli.main(["analyze", str(cohen), str(full), "--radii", "0", "0.5", "0.6"]) == 0
  rows = [
    line.split()
    for line in capsys.readouterr().out.splitlines()
    if line.startswith(("cohen", "full"))
  ]
  assert [[v.rstrip("*") for v in r[1:4]] for r in rows] == [["0.500", "0.500", "0.000"]] * 2


def test_refusals_name_arguments_and_the_command_line_tells_them_as_flags():
  """A claim rsjax refuses is told in the library's argument words (no flag), and the
  command line turns every ``name=value`` of it into its flag."""
  import re

  from rsjax import claims, methods
  from rsjax.app.cli._args import flag_message
  from rsjax.app.launch.errors import RunError

  told = set()
  for claim in claims.every_claim(m.name for m in methods.available()):
    why = claims.refusal(claim, methods.get(claim.method))
    if why is None:
      continue
    assert "--" not in why, why
    line = flag_message(RunError(why, "method"))
    assert not re.search(r"\b\w+=", line), line
    told.add(line)
  assert "--method idrs gives the binary radius only, not --multiclass" in told
  assert "--method srs has no budgeted CERTIFY (--grid ...)" in told
