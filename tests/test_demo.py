"""``rsjax demo``: reuses only models and rows made with the same settings."""

import os

import pytest

from rsjax.app import cli
from rsjax.records import io

# A test of the tools around the library: .ci/run runs it in the py311 stage only.
pytestmark = pytest.mark.tools

_SMALL = ["--sigmas", "0.25", "--epochs", "1", "--N", "64", "--images", "3", "--quiet"]


def test_demo_reuses_only_the_same_settings(tmp_path, capsys):
  out = str(tmp_path / "demo")
  assert cli.main(["demo", "--out", out, *_SMALL]) == 0
  first = capsys.readouterr().out
  assert "3 held-out MNIST digits, N0=100, N=64" in first
  rows = os.path.join(out, "certify_sigma_0.25.tsv")
  before = io.read_certify(rows)
  # The same settings: nothing new (the rows and the model are reused).
  assert cli.main(["demo", "--out", out, *_SMALL]) == 0
  again = io.read_certify(rows)
  assert list(again.idx) == list(before.idx) and list(again.time) == list(before.time)
  capsys.readouterr()
  # Another N or other epochs: stop, naming what differs, before anything is written.
  other_n = [*_SMALL]
  other_n[other_n.index("--N") + 1] = "128"
  assert cli.main(["demo", "--out", out, *other_n]) == 2
  err = capsys.readouterr().err
  assert "holds rows made with other settings (n 64 there, 128 now)" in err
  assert "--overwrite" in err and err.count("\n") == 1
  other_epochs = [*_SMALL]
  other_epochs[other_epochs.index("--epochs") + 1] = "2"
  assert cli.main(["demo", "--out", out, *other_epochs]) == 2
  assert "was trained with other settings (epochs 1 there, 2 now)" in capsys.readouterr().err
  assert list(io.read_certify(rows).time) == list(before.time)  # untouched
  # --overwrite starts over with the new settings, and the table says so.
  assert cli.main(["demo", "--out", out, *other_n, "--overwrite"]) == 0
  out_text = capsys.readouterr().out
  assert "starting over" in out_text and "N=128" in out_text
  assert io.read_run_record(rows)["sampling"]["n"] == 128
  # Fewer images: another declared index range, so another run (a run's rows are exactly its
  # declared ones); the table counts its rows.
  fewer = [*other_n]
  fewer[fewer.index("--images") + 1] = "2"
  assert cli.main(["demo", "--out", out, *fewer]) == 2
  assert "(images 3 there, 2 now)" in capsys.readouterr().err
  assert cli.main(["demo", "--out", out, *fewer, "--overwrite"]) == 0
  table = capsys.readouterr().out
  row = [line for line in table.splitlines() if line.startswith("sigma=0.25")]
  assert "2 held-out MNIST digits" in table and row[0].split()[-1] == "2"  # n
