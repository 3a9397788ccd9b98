"""What the demo and the command say when it matters to a new user: the demo's phases and the
time to expect at its start; what an interrupt (Ctrl-C or SIGTERM) kept and how to resume;
errors that name the file and the limit (an empty checkpoint, a binary result file, --alpha
above 0.5 refused before anything loads)."""

import os
import signal
import time

import pytest

from rsjax.app import demo
from rsjax.app.cli import _main, main


def test_the_plan_names_the_phases_and_the_time_to_expect(tmp_path):
  cfg = dict(demo.DEFAULTS)
  text = demo._plan(cfg, (0.25, 0.5), 100, "runs/demo")
  assert text.startswith("rsjax demo: 2 model(s), sigma 0.25, 0.5, in 4 phases:\n")
  for phase in (
    "1. train LeNet",
    "2. certify 100 held-out digits",
    "3. the certified",
    "4. verify",
  ):
    assert phase in text
  # The defaults took 3 min 14 s on an idle 2-core VM (docs/getting-started.md).
  assert "expected: about 3 min 30 s on an idle 2-core CPU" in text
  assert "run the same command again to resume" in text


def test_an_interrupt_says_how_many_rows_were_kept(tmp_path):
  rows = tmp_path / "certify_sigma_0.25.tsv"
  rows.write_text("idx\tlabel\n" + "".join(f"{i}\t0\n" for i in range(37)))
  jobs = [demo._Job(0.25, "t", None, "w", str(rows)), demo._Job(0.5, "t", None, "w", "none.tsv")]
  text = demo._kept(jobs, 100, str(tmp_path))
  assert f"37 of 100 rows in {rows}; 0 of 100 rows in none.tsv" in text
  assert "run the same command again to resume" in text


def test_sigterm_ends_a_command_as_an_interrupt_and_says_so(monkeypatch, capsys):
  from rsjax.app.cli import verify

  def terminated(args):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)  # the handler raises first

  monkeypatch.setattr(verify, "run", terminated)
  before = signal.getsignal(signal.SIGTERM)
  assert main(["verify", "x.tsv"]) == 143
  assert capsys.readouterr().err == "rsjax verify: terminated (SIGTERM)\n"
  assert signal.getsignal(signal.SIGTERM) is before


def test_the_demo_interrupted_tells_what_it_kept(monkeypatch, tmp_path, capsys):
  def interrupted(*args, **kwargs):
    raise _main.Terminated("SIGTERM")

  monkeypatch.setattr(demo, "_train", interrupted)
  out = tmp_path / "demo"
  argv = ["demo", "--out", str(out), "--images", "3", "--epochs", "1", "--N", "64", "--quiet"]
  assert main(argv) == 143
  got = capsys.readouterr()
  assert got.out.startswith("rsjax demo: 2 model(s), sigma 0.25, 0.5, in 4 phases:")
  assert got.err.startswith(
    f"rsjax demo: terminated (SIGTERM); kept: 0 of 3 rows in {out}/certify_sigma_0.25.tsv; "
  )
  assert "run the same command again to resume" in got.err


def test_alpha_above_its_limit_is_refused_by_the_parser(capsys):
  with pytest.raises(SystemExit) as e:
    main(["certify", "nowhere", "o.tsv", "--alpha", "0.7"])
  assert e.value.code == 2
  assert "--alpha: must be in (0, 0.5], got 0.7" in capsys.readouterr().err


def test_a_binary_result_file_is_named(tmp_path):
  from rsjax.records import io

  path = tmp_path / "g.tsv"
  path.write_bytes(b"\x00\xd4\xff garbage")
  with pytest.raises(ValueError, match=f"result file '{path}' line 1: not UTF-8 text"):
    io.read_certify(path)


def test_an_empty_checkpoint_is_called_empty(tmp_path):
  from rsjax.models import _torch

  path = tmp_path / "model.pth"
  path.touch()
  with pytest.raises(ValueError, match=r"model.pth' is empty \(0 bytes\)"):
    _torch._read(str(path))


def test_a_truncated_result_file_is_counted_right(tmp_path):
  import shutil

  from rsjax import verify

  run = os.path.join(os.path.dirname(__file__), "..", "results", "acr_study_quick", "gaussian.tsv")
  cut = tmp_path / "g.tsv"
  for suffix in (".run.json", ".cert.jsonl"):
    shutil.copy(run + suffix, str(cut) + suffix)
  with open(run) as f:
    cut.write_text("".join(f.readlines()[:2]))  # the header and 1 of its 100 rows
  summary = verify.verify(str(cut)).summary()
  assert summary.startswith(f"NOT verified: {cut} (1 of 100 declared rows in it): the record ")
  assert "holds 99 rows that are not in the file (first idx 10): a truncated" in summary
