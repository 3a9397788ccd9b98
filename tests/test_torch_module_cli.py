"""``--torch-module``: ``rsjax certify``, ``convert`` and ``bench`` take any PyTorch module.

A GroupNorm + SiLU net written in a Python file (``FILE.py:CLASS`` with its state dict) and
``torch.save``d whole (``FILE.pt``): certified from an array file, the run passes ``rsjax
verify`` and records the exported graph (its config digest) beside the parameters'
fingerprint; ``convert`` + ``certify DIR`` writes the same rows; ``bench --twin`` times the
module itself as the twin; ``rsjax audit`` of the module's run with the converted directory
draws the same counts; each model of ``tests/torch_user_models.py`` certifies from its file and
its run verifies. Needs PyTorch (skipped without).
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rsjax.app import cli  # noqa: E402
from rsjax.app.bench import rounds, run  # noqa: E402
from rsjax.records import io  # noqa: E402
from rsjax.records.canonical import model_config_digest  # noqa: E402
from rsjax.records.spec import RunSpec  # noqa: E402

NET = """
import torch
from torch import nn


class Net(nn.Module):
  def __init__(self):
    super().__init__()
    self.body = nn.Sequential(
      nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.SiLU(), nn.MaxPool2d(2),
      nn.Conv2d(8, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.SiLU())
    self.fc = nn.Linear(16, 4)

  def forward(self, x):
    return self.fc(self.body(x).mean((2, 3)))
"""

COMMON = ["--sigma", "0.25", "--N0", "16", "--N", "64", "--batch", "64", "--quiet"]


@pytest.fixture
def files(tmp_path, monkeypatch):
  """``{"py", "pt", "weights", "data"}``: the module's file, the module saved whole, its state
  dict and an array file of three 16x16 RGB images."""
  (tmp_path / "usernet.py").write_text(NET)
  monkeypatch.syspath_prepend(str(tmp_path))  # a torch.save'd module's class is importable
  import usernet

  torch.manual_seed(0)
  net = usernet.Net().eval()
  torch.save(net.state_dict(), tmp_path / "w.pth")
  torch.save(net, tmp_path / "net.pt")
  rng = np.random.default_rng(0)
  x = rng.uniform(size=(3, 16, 16, 3)).astype(np.float32)
  np.savez(tmp_path / "data.npz", x=x, y=np.array([0, 1, 2]), num_classes=4)
  yield {
    k: str(tmp_path / v)
    for k, v in (("py", "usernet.py"), ("pt", "net.pt"), ("weights", "w.pth"), ("data", "data.npz"))
  }
  sys.modules.pop("usernet", None)


def test_certify_verify_and_convert(files, tmp_path, capsys):
  rows1, rows2 = str(tmp_path / "a.tsv"), str(tmp_path / "b.tsv")
  module = ["--torch-module", files["py"] + ":Net", "--torch-checkpoint", files["weights"]]
  assert cli.main(["certify", *module, rows1, "--dataset", files["data"], *COMMON]) == 0
  out = capsys.readouterr().out
  assert "Net through torch.export" in out and "input normalization none" in out
  assert cli.main(["verify", rows1]) == 0
  assert "verified: all 3 rows" in capsys.readouterr().out
  model = RunSpec.read(rows1).model
  assert model.architecture == "Net" and model.source == "torch_checkpoint"
  assert len(model.fingerprint) == 16 and model.config is not None

  wd = str(tmp_path / "converted")
  assert cli.main(["convert", "--torch-module", files["pt"], wd, "--input-shape", "16,16,3"]) == 0
  config = json.loads((tmp_path / "converted" / "config.json").read_text())
  assert config["model"] == "torch_graph" and config["torch_arch"] == "Net"
  assert model_config_digest(config) == model.config  # the same graph, bound by its digest
  assert cli.main(["certify", wd, rows2, "--dataset", files["data"], *COMMON]) == 0
  assert RunSpec.read(rows2).model.fingerprint == model.fingerprint
  a, b = io.read_certify(rows1), io.read_certify(rows2)
  for col in ("idx", "label", "predict", "radius", "correct"):
    np.testing.assert_array_equal(getattr(a, col), getattr(b, col))
  capsys.readouterr()
  # the module's run, audited with the converted directory (no torch needed to load it)
  assert cli.main(["audit", rows1, "--model-dir", wd, "--rows", "all", "--quiet"]) == 0, (
    capsys.readouterr()
  )


def test_errors_are_one_line(files, tmp_path, capsys):
  rows = str(tmp_path / "a.tsv")
  bad = ["--torch-module", files["py"] + ":Nope", rows, "--dataset", files["data"], *COMMON]
  assert cli.main(["certify", *bad]) == 2
  err = capsys.readouterr().err
  assert "defines no 'Nope'" in err and err.count("\n") == 1
  assert cli.main(["convert", "--torch-module", files["pt"], str(tmp_path / "d")]) == 2
  err = capsys.readouterr().err
  assert "the input shape is needed" in err and err.count("\n") == 1


def test_bench_twin_is_the_module_itself(files, tmp_path, capsys, monkeypatch):
  monkeypatch.setattr(rounds, "ROUND_S", 0.2)
  monkeypatch.setattr(run, "SWEEP_CALL_S", 0.1)
  out = tmp_path / "b.json"
  argv = ["bench", "--torch-module", files["pt"], "--input-shape", "16,16,3", "--twin"]
  fast = ["--N", "1000", "--N0", "16", "--measure-n", "64", "--images", "1", "--batch", "32"]
  assert cli.main([*argv, *fast, "--twin-compile", "none", "--quiet", "--json", str(out)]) == 0
  doc = json.loads(out.read_text())
  assert doc["model"]["kind"] == "PyTorch module (torch.export)"
  (twin,) = doc["twin"]
  assert twin["eager"]["rsjax_speedup"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("cls", ["WideResNet", "DenseNet", "ViT", "GroupNormNet"])
def test_each_user_model_certifies_and_verifies(cls, tmp_path, capsys):
  """The four models of tests/torch_user_models.py (``FILE.py:CLASS``, their default sizes,
  initial weights): ``rsjax certify`` on two 32x32 images, then ``rsjax verify``."""
  import pathlib

  spec = str(pathlib.Path(__file__).with_name("torch_user_models.py")) + ":" + cls
  rng = np.random.default_rng(0)
  data = tmp_path / "data.npz"
  np.savez(data, x=rng.uniform(size=(2, 32, 32, 3)).astype(np.float32), y=np.array([0, 1]),
           num_classes=10)  # fmt: skip
  rows = str(tmp_path / "rows.tsv")
  fast = ["--sigma", "0.25", "--N0", "8", "--N", "32", "--batch", "32", "--quiet"]
  assert cli.main(["certify", "--torch-module", spec, rows, "--dataset", str(data), *fast]) == 0
  assert f"{cls} through torch.export" in capsys.readouterr().out
  assert cli.main(["verify", rows]) == 0
  assert "verified: all 2 rows" in capsys.readouterr().out


def test_a_module_of_another_class_count_is_refused_before_any_row(files, tmp_path, capsys):
  """The 4-class module on a 10-class dataset: one line naming both counts, as a checkpoint
  of another class count is refused, and no result file."""
  x = np.load(files["data"])["x"]
  other = tmp_path / "ten.npz"
  np.savez(other, x=x, y=np.array([0, 1, 9]), num_classes=10)
  rows = tmp_path / "a.tsv"
  module = ["--torch-module", files["py"] + ":Net", "--torch-checkpoint", files["weights"]]
  assert cli.main(["certify", *module, str(rows), "--dataset", str(other), *COMMON]) == 2
  err = capsys.readouterr().err
  assert "classifies 4 classes" in err and "has 10" in err and err.count("\n") == 1
  assert not rows.exists()
