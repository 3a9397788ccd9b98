"""Children of a ResNet that compute its function up to rounding: batch norm folded into the
weights (``rsjax.models.fold_batch_norm_weights``, a model directory of its own) and the
parent's own directory run packed (``rsjax recertify --pack``). Each recertifies from the
parent's run, verifies, and disagrees with its parent on (almost) no noisy input."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_packing import _randomize_batch_norm

from rsjax import models, verify
from rsjax.app import cli
from rsjax.records.spec import RunSpec
from rsjax.runs.runner import fingerprint

SHAPE = (8, 8, 1)
CONFIG = {"model": "resnet20", "num_classes": 10, "input_shape": list(SHAPE), "dataset": "digits",
          "model_kwargs": {"normalize": "digits"}}  # fmt: skip


def _resnet20():
  """resnet20 on 8x8 digits, its batch norm statistics away from the identity."""
  model = models.create_model("resnet20", num_classes=10, input_shape=SHAPE, normalize="digits",
                              rngs=0)  # fmt: skip
  return _randomize_batch_norm(model)


def test_folded_weights_keep_the_function_and_the_architecture(tmp_path):
  model = _resnet20()
  folded, pairs = models.fold_batch_norm_weights(model)
  assert pairs == models.fold_batch_norm(model)[1] > 0
  x = jnp.asarray(np.random.default_rng(1).random((4, *SHAPE)), jnp.float32)
  (a, pa), (b, pb) = models.to_apply_fn(model), models.to_apply_fn(folded)
  np.testing.assert_allclose(np.asarray(a(pa, x)), np.asarray(b(pb, x)), rtol=1e-4, atol=1e-4)
  assert fingerprint(pa) != fingerprint(pb)
  # The given model is unchanged, and the child saves and loads as a model directory.
  assert fingerprint(models.to_apply_fn(model)[1]) == fingerprint(pa)
  models.save_child(tmp_path / "folded", folded, CONFIG, {"transform": "fold-bn"})
  back = models.to_apply_fn(models.load_model(tmp_path / "folded")[0])
  np.testing.assert_array_equal(np.asarray(back[0](back[1], x)), np.asarray(b(pb, x)))


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
  root = tmp_path_factory.mktemp("children")
  d = root / "resnet20"
  models.save_model(str(d), _resnet20(), CONFIG)
  run = root / "parent.tsv"
  argv = ("certify", d, run, "--sigma", "0.25", "--N", "200", "--N0", "20", "--max", "4",
          "--batch", "100", "--quiet")  # fmt: skip
  assert cli.main([str(a) for a in argv]) == 0
  return root, d, run


def _recertify(parent_run, child_dir, out, *more):
  argv = ("recertify", parent_run, child_dir, out, "--N", "100", "--batch", "100", "--quiet")
  assert cli.main([str(a) for a in (*argv, *more)]) == 0
  report = verify.verify(str(out))
  assert report.ok, report.summary()
  rows = [json.loads(line) for line in open(str(out) + ".cert.jsonl")]
  assert len(rows) == 4
  return [r["counts"].get("1", 0) for r in rows]


@pytest.mark.heavy
@pytest.mark.parametrize("child", ["fold", "pack"])
def test_the_child_recertifies_and_verifies(parent, child):
  root, d, run = parent
  if child == "fold":
    folded, _ = models.fold_batch_norm_weights(models.load_model(d)[0])
    child_dir, more = root / "folded", ()
    models.save_child(child_dir, folded, CONFIG, {"transform": "fold-bn"})
  else:
    child_dir, more = d, ("--pack", "2")
  out = root / f"{child}.tsv"
  disagree = _recertify(run, child_dir, out, *more)
  # Rounding flips a top class on a noisy input rarely: at most a few of 4 x 100.
  assert sum(disagree) <= 4, disagree
  spec = RunSpec.read(out)
  assert spec.options["parent_claim"] == RunSpec.read(run).claim_digest()
  # The packed model's weights are laid out anew: a fingerprint of their own, as the fold's.
  assert spec.model.fingerprint != RunSpec.read(run).model.fingerprint
  assert (spec.model.path == RunSpec.read(run).model.path) == (child == "pack")
  assert spec.sampling.pack == (2 if child == "pack" else 1)
  jax.clear_caches()
