"""ViT and BEiT classifiers in NNX reproduce Hugging Face transformers' on random weights."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jax  # noqa: E402
from flax import nnx  # noqa: E402

from rsjax import models  # noqa: E402

SMALL = dict(
  hidden_size=64,
  num_hidden_layers=2,
  num_attention_heads=4,
  intermediate_size=96,
  image_size=32,
  patch_size=8,
  num_labels=10,
)


def reference(kind):
  torch.manual_seed(0)
  if kind == "vit":
    ref = transformers.ViTForImageClassification(transformers.ViTConfig(**SMALL))
  else:  # BEiT as the public BEiT-L classifiers: relative bias per layer, layer scale, mean pool
    config = transformers.BeitConfig(
      **SMALL,
      use_relative_position_bias=True,
      use_absolute_position_embeddings=False,
      use_mean_pooling=True,
      layer_scale_init_value=0.1,
    )
    ref = transformers.BeitForImageClassification(config)
  g = torch.Generator().manual_seed(1)
  with torch.no_grad():  # random everywhere (zero biases and tables hide layout errors)
    for name, p in ref.named_parameters():
      noise = torch.randn(p.shape, generator=g)
      if "layernorm" in name or "lambda" in name:
        p.copy_((1.0 if name.endswith("weight") or "lambda" in name else 0.0) + 0.1 * noise)
      else:
        p.copy_(noise / np.sqrt(max(p.shape[-1], 1)))
  return ref.eval()


def logits(model, x):
  graphdef, state = nnx.split(model)
  return np.asarray(jax.jit(lambda s, u: nnx.merge(graphdef, s)(u))(state, x))


@pytest.mark.parametrize("kind", ["vit", "beit"])
def test_logits_match_transformers(kind):
  ref = reference(kind)
  model = models.vit_from_transformers(ref)
  x = np.random.default_rng(2).random((3, 32, 32, 3)).astype(np.float32)
  with torch.no_grad():  # the reference takes the image processor's output: (x - 0.5) / 0.5
    want = ref(pixel_values=torch.tensor((x.transpose(0, 3, 1, 2) - 0.5) / 0.5)).logits.numpy()
  got = logits(model, x)
  assert got.shape == want.shape == (3, 10) and np.std(want) > 0.3
  assert np.max(np.abs(got - want)) <= 1e-4, np.max(np.abs(got - want))


def _legacy(key):
  """The state dict names of transformers 4 (the public checkpoints' files)."""
  for new, old in (
    (".layers.", ".encoder.layer."),
    ("attention.q_proj", "attention.attention.query"),
    ("attention.k_proj", "attention.attention.key"),
    ("attention.v_proj", "attention.attention.value"),
    ("attention.o_proj", "attention.output.dense"),
    ("mlp.fc1", "intermediate.dense"),
    ("mlp.fc2", "output.dense"),
    ("relative_position_bias.", "attention.attention.relative_position_bias."),
  ):
    key = key.replace(new, old)
  return key


@pytest.mark.parametrize("kind", ["vit", "beit"])
def test_legacy_names_and_mismatches(kind):
  ref = reference(kind)
  state = {_legacy(k): v for k, v in ref.state_dict().items()}
  assert any("encoder.layer" in k for k in state)
  config = models.vit_config_from_transformers(ref.config.to_dict())
  model = models.load_transformers_state_dict(models.VisionTransformer(config, rngs=0), state)
  x = np.random.default_rng(3).random((1, 32, 32, 3)).astype(np.float32)
  np.testing.assert_array_equal(logits(model, x), logits(models.vit_from_transformers(ref), x))
  state.pop("classifier.bias")
  with pytest.raises(ValueError, match="leaves 1 of"):
    models.load_transformers_state_dict(models.VisionTransformer(config, rngs=0), state)
  with pytest.raises(ValueError, match="model_type 'swin'"):
    models.vit_config_from_transformers({"model_type": "swin"})


def test_model_directory_round_trip(tmp_path):
  ref = reference("beit")
  model = models.vit_from_transformers(ref)
  models.save_model(tmp_path / "beit", model, models.vit_model_config(model.config, sigma=0.0))
  again, config = models.load_model(tmp_path / "beit")
  assert config["model"] == "vit" and config["input_shape"] == [32, 32, 3]
  x = np.random.default_rng(4).random((2, 32, 32, 3)).astype(np.float32)
  np.testing.assert_array_equal(logits(again, x), logits(model, x))
