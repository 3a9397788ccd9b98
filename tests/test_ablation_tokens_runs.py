"""``rsjax certify --method patch --drop-tokens`` with a ViT model directory (issue 72, item
3): the run states the dropped tokens (``method.details.tokens``), verifies and audits; a
forger who claims the plain forward (the option and the detail removed) passes verify, whose
rules hold for any votes, and is caught by the audit, which draws the plain forward's votes."""

import json

import pytest
from flax import nnx
from run_edits import copy_run, edit_run

from rsjax import models, verify
from rsjax.ablation._check import TOKENS_DROPPED
from rsjax.app import audit, cli

VIT = {"patch_size": 4, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
       "intermediate_size": 32, "mean": [0.5, 0.5], "std": [0.5, 0.5]}  # fmt: skip


@pytest.fixture(scope="module")
def vit_run(tmp_path_factory):
  base = tmp_path_factory.mktemp("vit")
  model = models.create_model("vit", num_classes=10, input_shape=(8, 8, 2), rngs=0, **VIT)
  for _path, var in nnx.iter_graph(model):  # the zero-initialized embeddings: random
    if isinstance(var, nnx.Param) and var[...].ndim == 3:
      var[...] = _normal(var[...].shape)
  config = {"model": "vit", "num_classes": 10, "input_shape": [8, 8, 2], "model_kwargs": VIT,
            "input_encoding": "ablation", "dataset": "digits", "sigma": 0.0}  # fmt: skip
  models.save_model(base / "m", model, config)
  out = base / "p.tsv"
  argv = ["certify", base / "m", out, "--method", "patch", "--ablation-size", "3",
          "--drop-tokens", "--dataset", "digits", "--skip", "60", "--sigma", "1", "--quiet"]  # fmt: skip
  assert cli.main([str(a) for a in argv]) == 0
  return base / "m", out


def _normal(shape):
  import numpy as np

  return np.random.default_rng(0).normal(0, 1.0, shape).astype(np.float32)


def test_honest_dropped_run_verifies_and_audits(vit_run):
  model, out = vit_run
  rep = verify.verify(out)
  assert rep.ok, rep.summary()
  assert "ablated ViT tokens dropped" in rep.claim
  run = json.loads((out.parent / (out.name + ".run.json")).read_text())
  assert run["method"]["details"]["tokens"] == TOKENS_DROPPED
  assert audit.audit(out, model_dir=model, rows="all").ok


def test_claiming_the_plain_forward_is_caught_by_the_audit(vit_run, tmp_path):
  model, out = vit_run
  f = copy_run(out, tmp_path / "plain.tsv")

  def plain(run):
    run["method"]["options"]["drop_tokens"] = False
    del run["method"]["details"]["tokens"]

  edit_run(f, plain)
  assert verify.verify(f).ok  # the rules hold for any votes
  assert not audit.audit(f, model_dir=model, rows="all").ok


def test_dropping_the_detail_alone_is_caught_by_verify(vit_run, tmp_path):
  _, out = vit_run
  f = copy_run(out, tmp_path / "d.tsv")

  def undropped(run):
    del run["method"]["details"]["tokens"]

  edit_run(f, undropped)
  assert not verify.verify(f).ok
