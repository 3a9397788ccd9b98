"""``rsjax bench --method patch`` / ``ablation`` (issue 72, item 4): the ablation workloads
timed through ``rsjax.certify`` with their certifiers, on a model of encoded images; rounds
shortened (their length is not what is tested)."""

import json

import pytest

from rsjax.app import cli
from rsjax.app.bench import ablation, rounds

ROUND_S = 0.2
LENET = ["bench", "--arch", "lenet", "--input-shape", "28,28,2", "--cache-dir", "off", "--quiet"]


@pytest.fixture(autouse=True)
def short_rounds(monkeypatch):
  monkeypatch.setattr(rounds, "ROUND_S", ROUND_S)


def test_patch_positions_per_second(tmp_path, capsys):
  out = tmp_path / "p.json"
  argv = [*LENET, "--method", "patch", "--ablation-size", "3", "--images", "2", "--json", str(out)]
  assert cli.main(argv) == 0
  text = capsys.readouterr().out
  assert "positions/s:" in text and "certified images/s:" in text
  doc = json.loads(out.read_text())
  assert doc["command"] == "rsjax " + " ".join(argv)
  want = {"ablation": "column", "ablation_size": 3, "drop_tokens": False}
  assert doc["method"] == "patch" and doc["options"] == want
  assert doc["image_shape"] == [28, 28, 1] and doc["passes_per_image"] == 28  # column bands
  assert doc["images_per_call"] == 2 and doc["unit"] == "positions"
  assert len(doc["rounds"]) >= 3 and all(r["seconds"] >= ROUND_S for r in doc["rounds"])
  assert doc["images_per_s"] == pytest.approx(doc["samples_per_s"] / 28)
  assert doc["compile_s"] > 0 and doc["machine"]["cores"] > 0


def test_l0_samples_per_second(tmp_path, capsys):
  out = tmp_path / "a.json"
  argv = [*LENET, "--method", "ablation", "--keep", "20", "--N0", "8", "--measure-n", "32",
          "--images", "1", "--json", str(out)]  # fmt: skip
  assert cli.main(argv) == 0
  assert "at N 100,000:" in capsys.readouterr().out
  doc = json.loads(out.read_text())
  assert doc["options"] == {"keep": 20} and doc["passes_per_image"] == 8 + 32
  assert doc["unit"] == "samples" and doc["measured_n"] == 32 and doc["target_n"] == 100_000
  assert doc["seconds_per_image_at_target_n"] == pytest.approx(100_008 / doc["samples_per_s"])


@pytest.mark.parametrize(
  "more, needle",
  [
    (["--input-shape", "28,28,1", "--method", "patch"], "not encoded images H,W,2C"),
    (["--method", "patch", "--twin"], "not with --method"),
    (["--method", "patch", "--drop-tokens"], "--drop-tokens: drop_tokens: the model must be"),
  ],
)
def test_errors_are_one_line(more, needle, capsys):
  argv = ["bench", "--arch", "lenet", "--input-shape", "28,28,2", *more]
  assert cli.main(argv) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and needle in err, err


def test_image_shape_halves_the_channels():
  class T:
    input_shape = (32, 32, 6)

  assert ablation.image_shape(T()) == (32, 32, 3)


def test_art_comparison_says_when_art_is_missing(monkeypatch, capsys):
  import importlib.util

  from benchmarks import art_patch

  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "art" else real(n))
  assert art_patch.art_patch(model_dir="nowhere") == {"skipped": "art not installed"}
  assert "pip install adversarial-robustness-toolbox==1.20.1" in capsys.readouterr().out


def test_patch_with_dropped_tokens_on_a_vit():
  from rsjax import models
  from rsjax.app.bench import Request, Target

  vit = models.create_model("vit", num_classes=3, input_shape=(8, 8, 2), rngs=0, patch_size=4,
                            hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=32, mean=(0.5, 0.5), std=(0.5, 0.5))  # fmt: skip
  apply_fn, params = models.to_apply_fn(vit)
  target = Target("vit", "architecture (random weights)", apply_fn, params, (8, 8, 2), 3, 0.25)
  options = {"ablation": "block", "ablation_size": 3, "drop_tokens": True}
  doc = ablation.bench_ablation(target, Request(images=2), "patch", options, log=lambda s: None)
  assert doc["options"] == options and doc["passes_per_image"] == 64 and doc["samples_per_s"] > 0
