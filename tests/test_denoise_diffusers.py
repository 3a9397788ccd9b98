"""The NNX UNet2DModel port reproduces diffusers' UNet2DModel on small random configurations."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

import jax  # noqa: E402
from flax import nnx  # noqa: E402

from rsjax.models.denoise import diffusers_import, unet  # noqa: E402


def nchw(model, x, t):
  """The NNX model, compiled once, on NCHW torch inputs -> NCHW numpy outputs."""
  graphdef, state = nnx.split(model)
  fn = jax.jit(lambda s, x, t: nnx.merge(graphdef, s)(x, t))
  return np.asarray(
    fn(state, x.numpy().transpose(0, 2, 3, 1), np.asarray(t, np.float32))
  ).transpose(0, 3, 1, 2)


# The block layout of google/ddpm-cifar10-32 at a small width, and a variant with diffusers'
# other defaults (flipped embedding, padding 1, several heads, no mid attention).
CONFIGS = [
  dict(
    sample_size=16,
    in_channels=3,
    out_channels=3,
    block_out_channels=(16, 32, 32),
    layers_per_block=2,
    down_block_types=("DownBlock2D", "AttnDownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "AttnUpBlock2D", "UpBlock2D"),
    downsample_padding=0,
    flip_sin_to_cos=False,
    freq_shift=1,
    norm_num_groups=8,
    norm_eps=1e-6,
    attention_head_dim=None,
  ),
  dict(
    sample_size=8,
    in_channels=1,
    out_channels=1,
    block_out_channels=(8, 16),
    layers_per_block=1,
    down_block_types=("AttnDownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "AttnUpBlock2D"),
    norm_num_groups=4,
    attention_head_dim=4,
    add_attention=False,
  ),
]


@pytest.mark.parametrize("config", CONFIGS)
def test_unet_matches_diffusers(config):
  torch.manual_seed(0)
  ref = diffusers.UNet2DModel(**config).eval()
  # Random non-trivial norms and biases (a fresh model has scale 1, bias 0).
  with torch.no_grad():
    for name, p in ref.named_parameters():
      if "norm" in name:
        p.add_(0.1 * torch.randn_like(p))
  size = config["sample_size"]
  x = torch.randn(3, config["in_channels"], size, size)
  t = torch.tensor([0, 17, 999])
  with torch.no_grad():
    want = ref(x, t).sample.numpy()
  model = diffusers_import.from_diffusers(ref)
  got = nchw(model, x, t.numpy())
  err = np.max(np.abs(got - want))
  assert err <= 1e-4, err
  # A float timestep (improved-diffusion's rescaled t) embeds the same way.
  with torch.no_grad():
    want_f = ref(x[:1], torch.tensor([289.5])).sample.numpy()
  got_f = nchw(model, x[:1], 289.5)
  assert np.max(np.abs(got_f - want_f)) <= 1e-4


def test_save_pretrained_directory_and_legacy_names(tmp_path):
  torch.manual_seed(1)
  ref = diffusers.UNet2DModel(**CONFIGS[0]).eval()
  ref.save_pretrained(tmp_path)
  model = diffusers_import.load_diffusers_dir(tmp_path)
  x = torch.randn(2, 3, 16, 16)
  with torch.no_grad():
    want = ref(x, torch.tensor([5, 5])).sample.numpy()
  got = nchw(model, x, 5)
  assert np.max(np.abs(got - want)) <= 1e-4
  # Old checkpoints name the attention weights query/key/value/proj_attn.
  legacy = {
    k.replace("to_q", "query")
    .replace("to_k", "key")
    .replace("to_v", "value")
    .replace("to_out.0", "proj_attn"): v
    for k, v in ref.state_dict().items()
  }
  again = diffusers_import.load_state_dict(
    diffusers_import.unet_shapes(unet.UNetConfig.from_diffusers(dict(ref.config))), legacy
  )
  got2 = nchw(again, x, 5)
  np.testing.assert_array_equal(got2, got)


def test_mismatched_state_dict_is_an_error():
  ref = diffusers.UNet2DModel(**CONFIGS[1])
  other = diffusers_import.unet_shapes(unet.UNetConfig.from_diffusers(dict(CONFIGS[0])))
  with pytest.raises(ValueError, match="shape|no parameter"):
    diffusers_import.load_state_dict(other, ref.state_dict())
  state = dict(ref.state_dict())
  state.pop("conv_out.bias")
  with pytest.raises(ValueError, match="leaves 1 of"):
    diffusers_import.load_state_dict(
      diffusers_import.unet_shapes(unet.UNetConfig.from_diffusers(dict(ref.config))), state
    )
  with pytest.raises(ValueError, match="not supported"):
    unet.UNetConfig.from_diffusers({**CONFIGS[0], "time_embedding_type": "fourier"})
