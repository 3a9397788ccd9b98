"""``rsjax train --method patch --drop-tokens`` (issue 72): a ViT trained on the kept region's
tokens only. Its training forward is the certifier's (``token_counts``) bit for bit at every
position; it does not see the ablated pixels (its gradients do not move with them); a trained
directory loads as a plain ViT, certifies with ``--drop-tokens``, verifies and audits; a model
that is no ViT is refused in one line."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rsjax import models, verify
from rsjax.ablation import encode, position_masks, position_tokens, to_token_apply
from rsjax.ablation._dropping import DroppingViT, dropping_twin, most_tokens
from rsjax.ablation.training import DROPPED
from rsjax.app import audit, cli

VIT = {"patch_size": 4, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
       "intermediate_size": 32, "mean": [0.5, 0.5], "std": [0.5, 0.5]}  # fmt: skip


def _vit():
  model = models.create_model("vit", num_classes=10, input_shape=(8, 8, 2), rngs=0, **VIT)
  rng = np.random.default_rng(0)
  for _path, var in nnx.iter_graph(model):  # the zero-initialized embeddings: random
    if isinstance(var, nnx.Param) and var[...].ndim == 3:
      var[...] = rng.normal(0, 1.0, var[...].shape).astype(np.float32)
  return model


@pytest.mark.parametrize(("ablation", "size"), [("column", 3), ("row", 2), ("block", 3)])
def test_the_training_forward_is_the_certifiers_at_every_position(ablation, size):
  model = _vit()
  twin = dropping_twin(model, ablation, size)
  masks = position_masks((8, 8, 1), ablation, size)
  tokens, valid = position_tokens(masks, 4)
  assert twin.most_tokens == tokens.shape[1] == most_tokens((8, 8, 2), ablation, size, 4)
  apply, variables = to_token_apply(model)
  x = jnp.asarray(np.random.default_rng(1).random((5, 8, 8, 1)), jnp.float32)
  for i, m in enumerate(masks):
    z = encode(x, jnp.asarray(np.broadcast_to(m, x.shape[:3])))
    t = jnp.broadcast_to(tokens[i], (5, tokens.shape[1]))
    v = jnp.broadcast_to(valid[i], (5, tokens.shape[1]))
    np.testing.assert_array_equal(np.asarray(twin(z)), np.asarray(apply(variables, z, t, v)))


def test_the_ablated_pixels_move_no_gradient():
  twin = dropping_twin(_vit(), "column", 3)
  m = jnp.asarray(position_masks((8, 8, 1), "column", 3)[2])
  x = np.random.default_rng(2).random((4, 8, 8, 1)).astype(np.float32)
  other = np.where(np.asarray(m)[None, :, :, None], x, 1.0 - x)  # the ablated pixels changed

  def loss(model, x):
    z = encode(jnp.asarray(x), jnp.broadcast_to(m, x.shape[:3]))
    return jnp.sum(model(z) ** 2)

  g1 = jax.tree.leaves(nnx.grad(loss)(twin, x))
  g2 = jax.tree.leaves(nnx.grad(loss)(twin, other))
  for a, b in zip(g1, g2, strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_twin_holds_a_plain_vits_state():
  model = _vit()
  twin = dropping_twin(model, "block", 3)
  assert isinstance(twin, DroppingViT)
  a = jax.tree.leaves(nnx.state(model))
  b = jax.tree.leaves(nnx.state(twin))
  assert len(a) == len(b)
  for u, w in zip(a, b, strict=True):
    np.testing.assert_array_equal(np.asarray(u), np.asarray(w))


def test_a_model_that_is_no_vit_is_refused_in_one_line(tmp_path, capsys):
  argv = ["train", "--model", "mlp", "--dataset", "digits", "--epochs", "1", "--out",
          str(tmp_path / "m"), "--method", "patch", "--ablation-size", "3", "--drop-tokens"]  # fmt: skip
  assert cli.main(argv) != 0
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "--drop-tokens" in err[0] and "ViT" in err[0]


def _train(out, init):
  """One epoch of ``rsjax train --method patch --drop-tokens --init INIT`` on the digits (the
  trainer as the command calls it: ``--model vit`` has no flag for the patch size)."""
  from rsjax.ablation.method import PATCH_METHOD
  from rsjax.app import launch
  from rsjax.training import TrainConfig
  from rsjax.training.job import TrainJob

  train = launch.open_dataset("digits", "train", None)
  test = launch.open_dataset("digits", "test", None)
  config = {"model": "vit", "num_classes": 10, "input_shape": [8, 8, 1], "dataset": "digits"}
  job = TrainJob(
    jax.random.key(0), None, train.arrays(), test.arrays(),
    TrainConfig(sigma=0.0, epochs=1, batch_size=64, lr=0.05), str(out), config, progress=False,
  )  # fmt: skip
  opts = {"ablation": "column", "ablation_size": 3, "drop_tokens": True, "init": str(init)}
  return PATCH_METHOD.training.train(job, **opts)


@pytest.mark.heavy
def test_a_trained_vit_certifies_with_dropped_tokens_and_verifies(tmp_path):
  init = tmp_path / "init"
  config = {"model": "vit", "num_classes": 10, "input_shape": [8, 8, 2], "model_kwargs": VIT,
            "input_encoding": "ablation", "dataset": "digits", "sigma": 0.0}  # fmt: skip
  models.save_model(init, _vit(), config)
  out = tmp_path / "m"
  assert "accuracy on ablated test images" in _train(out, init)
  saved = json.loads((out / "config.json").read_text())
  assert saved[DROPPED] is True and saved["model_kwargs"] == VIT
  model, _ = models.load_model(str(out))
  assert type(model) is models.VisionTransformer
  before, _ = models.load_model(str(init))
  moved = [not np.array_equal(np.asarray(a), np.asarray(b)) for a, b in
           zip(jax.tree.leaves(nnx.state(before)), jax.tree.leaves(nnx.state(model)), strict=True)]  # fmt: skip
  assert any(moved)  # trained
  tsv = tmp_path / "p.tsv"
  argv = ["certify", out, tsv, "--method", "patch", "--ablation-size", "3", "--drop-tokens",
          "--dataset", "digits", "--skip", "60", "--sigma", "1", "--quiet"]  # fmt: skip
  assert cli.main([str(a) for a in argv]) == 0
  assert verify.verify(tsv).ok
  assert audit.audit(tsv, model_dir=out, rows="all").ok
