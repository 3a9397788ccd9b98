"""Token dropping for derandomized smoothing with a ViT (issue 72, item 3).

The equality tested: a ViT whose tokens holding no kept pixel are **dropped** gives the same
votes, at every band or block position, as the same ViT on the **full** encoded image with
those tokens **masked** out of every attention's keys (and of BEiT's mean pooling); its logits
agree to float error. The plain ViT on the full encoded image (the all-ablated tokens attended
to) does not give the same logits, so that is not claimed. Each dropped vote depends only on
the pixels of its kept region (bit for bit), which is what the patch certificate needs.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rsjax.ablation import _ablate, _tokens
from rsjax.models._vit import VisionTransformer, ViTConfig

SHAPE = (12, 12, 1)  # images; the ViT takes the encoding, 2 channels
PATCH = 4


def _vit(kind: str = "vit", seed: int = 0) -> VisionTransformer:
  beit = kind == "beit"
  cfg = ViTConfig(
    kind=kind, image_size=12, patch_size=PATCH, num_channels=2, hidden_size=32,
    num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, num_labels=5,
    layer_norm_eps=1e-6, use_absolute_position_embeddings=not beit,
    use_relative_position_bias=beit, layer_scale_init_value=0.1 if beit else 0.0,
    use_mean_pooling=beit, mean=(0.5, 0.5), std=(0.5, 0.5),
  )  # fmt: skip
  model = VisionTransformer(cfg, rngs=nnx.Rngs(seed))
  rng = np.random.default_rng(seed)
  for _path, var in nnx.iter_graph(model):  # the zero-initialized embeddings and biases, random
    if isinstance(var, nnx.Param) and not np.any(np.asarray(var[...])):
      var[...] = jnp.asarray(rng.normal(0, 0.5, var[...].shape), jnp.float32)
  return model


def _images(n: int, seed: int = 1) -> np.ndarray:
  return np.random.default_rng(seed).uniform(0, 1, (n, *SHAPE)).astype(np.float32)


def test_position_tokens_are_the_patches_a_region_touches():
  masks = _ablate.position_masks(SHAPE, "column", 3)
  tokens, valid = _tokens.position_tokens(masks, PATCH)
  assert tokens.shape == (12, 6) and valid.shape == (12, 6)  # 2 of 3 patch columns, 3 rows
  for p, m in enumerate(masks):
    want = {r * 3 + c for r in range(3) for c in range(3) if m[:, c * 4 : c * 4 + 4].any()}
    assert set(tokens[p][valid[p]].tolist()) == want
  aligned = [p for p in range(12) if p % 4 in (0, 1)]  # bands inside one patch column
  assert all(valid[p].sum() == 3 for p in aligned)
  with pytest.raises(ValueError, match="patch 5 must divide"):
    _tokens.kept_tokens(masks, 5)


@pytest.mark.parametrize("kind", ["vit", "beit"])
def test_dropped_logits_equal_masked_full_image(kind):
  model = _vit(kind)
  masks = _ablate.position_masks(SHAPE, "block", 5)[::7]
  x = _images(len(masks))
  z = _ablate.encode(jnp.asarray(x), jnp.asarray(masks))
  tokens, valid = _tokens.position_tokens(masks, PATCH)
  dropped = model(z, tokens=jnp.asarray(tokens), valid=jnp.asarray(valid))
  masked_fn, variables = _tokens.to_masked_apply(model)
  masked = masked_fn(variables, z)
  np.testing.assert_allclose(np.asarray(dropped), np.asarray(masked), atol=2e-5, rtol=1e-5)
  plain = model(z)  # the all-ablated tokens attended to: other logits
  assert np.max(np.abs(np.asarray(plain) - np.asarray(masked))) > 1e-2


def test_plain_forward_unchanged_by_the_new_arguments():
  model = _vit()
  z = _ablate.encode(jnp.asarray(_images(3)), jnp.ones((3, 12, 12), bool))
  every = jnp.broadcast_to(jnp.arange(9), (3, 9))
  a, b = model(z), model(z, tokens=every, valid=jnp.ones((3, 9), bool))
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("ablation,size", [("column", 3), ("row", 5), ("block", 4)])
def test_dropped_counts_equal_masked_full_image_counts(ablation, size):
  model = _vit(seed=2)
  x = _images(4, seed=3)
  masks = _ablate.position_masks(SHAPE, ablation, size)
  apply, variables = _tokens.to_token_apply(model)
  dropped = _tokens.token_counts(apply, variables, x, masks, PATCH, 5, batch=40)
  masked_fn, variables = _tokens.to_masked_apply(model)
  full = _ablate.patch_counts(masked_fn, variables, x, masks, 5, batch=40)
  assert dropped.sum(axis=1).tolist() == [len(masks)] * 4
  np.testing.assert_array_equal(dropped, full)
  again = _tokens.token_counts(apply, variables, x, masks, PATCH, 5, batch=7)
  np.testing.assert_array_equal(dropped, again)  # the batch is speed only


def test_dropped_vote_depends_only_on_the_kept_region():
  model = _vit(seed=4)
  masks = _ablate.position_masks(SHAPE, "column", 3)
  tokens, valid = _tokens.position_tokens(masks, PATCH)
  x, y = _images(len(masks), seed=5), _images(len(masks), seed=6)
  y = np.where(masks[..., None], x, y)  # the same kept band, every other pixel changed
  run = jax.jit(lambda v: model(_ablate.encode(v, jnp.asarray(masks)), tokens, valid))
  np.testing.assert_array_equal(np.asarray(run(x)), np.asarray(run(y)))


def test_token_apply_refuses_another_model():
  with pytest.raises(ValueError, match="VisionTransformer"):
    _tokens.to_token_apply(nnx.Linear(2, 2, rngs=nnx.Rngs(0)))


def test_the_benchmark_runs_and_its_counts_agree(tmp_path):
  from benchmarks.ablation import token_dropping

  vit = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
         "intermediate_size": 32}  # fmt: skip
  out = tmp_path / "t.json"
  doc = token_dropping(image=12, patch=4, size=3, images=2, classes=3, rounds=1, vit=vit,
                       json=str(out))  # fmt: skip
  assert out.is_file() and doc["positions"] == 12 and doc["tokens_kept_max"] == 6
  assert doc["counts_dropped_equal_masked"] and doc["images_counts_differ_dropped_masked"] == 0
  assert set(doc["images_per_s"]) == {"full", "masked", "dropped"}


def test_patch_certifier_drops_tokens_through_rsjax_certify():
  import rsjax
  from rsjax.ablation import Patch
  from rsjax.ablation._certify import details_of
  from rsjax.ablation._check import TOKENS_DROPPED, _patch_details
  from rsjax.models import to_apply_fn

  model = _vit(seed=7)
  x = _images(3, seed=8)
  apply_fn, variables = to_apply_fn(model)
  cert = rsjax.certify(0, apply_fn, variables, x, num_classes=5,
                       certifier=Patch("column", 3, drop_tokens=True))  # fmt: skip
  masks = _ablate.position_masks(SHAPE, "column", 3)
  masked_fn, variables = _tokens.to_masked_apply(model)
  full = _ablate.patch_counts(masked_fn, variables, x, masks, 5)
  np.testing.assert_array_equal(np.asarray(cert.counts), full)
  assert details_of("column", 3, SHAPE, None, True)["tokens"] == TOKENS_DROPPED
  assert "tokens" not in details_of("column", 3, SHAPE)  # runs without it: unchanged
  settings = {"ablation": "column", "ablation_size": 3, "drop_tokens": True}
  want = _patch_details({"settings": settings, "input_shape": [12, 12, 1]})
  assert want == details_of("column", 3, SHAPE, None, True)  # verify's half agrees
  lin = nnx.Linear(288, 5, rngs=nnx.Rngs(0))
  flat_fn, flat_vars = to_apply_fn(lin)
  with pytest.raises(ValueError, match="drop_tokens: the model must be a rsjax ViT"):
    rsjax.certify(0, lambda p, z: flat_fn(p, z.reshape(len(z), -1)), flat_vars, x,
                  num_classes=5, certifier=Patch("column", 3, drop_tokens=True))  # fmt: skip
