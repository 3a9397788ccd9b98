"""The NNX port of OpenAI's diffusion UNetModel reproduces the reference (guided_diffusion).

The reference is OpenAI's own code, published on PyPI as ``guided-diffusion-sdk`` (import name
``guided_diffusion``); improved-diffusion's UNetModel is the same network with the legacy
attention order and no resblock_updown / num_head_channels, so the CIFAR-10 configuration is built
from improved-diffusion's flags and compared with the reference UNetModel given those arguments.
Small widths (32 channels) keep the configurations' flags otherwise unchanged; CIFAR-10 is also
compared at its full width (52.5M parameters, a few seconds).
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gd_unet = pytest.importorskip("guided_diffusion.unet")
gd_diffusion = pytest.importorskip("guided_diffusion.gaussian_diffusion")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

from rsjax.models.denoise import diffusion, openai_import  # noqa: E402

SMALL_CIFAR = {**openai_import.CIFAR10_UNCOND, "num_channels": 32}
SMALL_IMAGENET = {**openai_import.IMAGENET256_UNCOND, "num_channels": 32, "num_head_channels": 32}


def reference(flags):
  """The reference UNetModel for the flags (create_model's argument mapping)."""
  config, _ = openai_import.config_from_flags(flags)
  return gd_unet.UNetModel(
    image_size=flags["image_size"],
    in_channels=3,
    model_channels=config.model_channels,
    out_channels=config.out_channels,
    num_res_blocks=config.num_res_blocks,
    attention_resolutions=config.attention_resolutions,
    dropout=flags.get("dropout", 0.0),
    channel_mult=config.channel_mult,
    num_heads=config.num_heads,
    num_head_channels=config.num_head_channels,
    num_heads_upsample=config.num_heads_upsample,
    use_scale_shift_norm=config.use_scale_shift_norm,
    resblock_updown=config.resblock_updown,
    use_new_attention_order=config.use_new_attention_order,
  ).eval()


def randomize(ref, seed):
  """Random weights everywhere (the reference zero-initializes every output conv)."""
  g = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in ref.named_parameters():
      if "norm" in name or name.startswith("out.0") or "in_layers.0" in name:
        p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn(p.shape, generator=g))
      else:
        p.copy_(torch.randn(p.shape, generator=g) / np.sqrt(max(p[0].numel(), 1)))
  return ref


def nchw(model, x, t, *, full=True):
  graphdef, state = nnx.split(model)
  fn = jax.jit(lambda s, x, t: nnx.merge(graphdef, s)(x, t, full=full))
  return np.asarray(fn(state, x.numpy().transpose(0, 2, 3, 1), np.asarray(t))).transpose(0, 3, 1, 2)


@pytest.mark.parametrize(
  "flags, size",
  [(SMALL_CIFAR, 32), (SMALL_IMAGENET, 256), (openai_import.CIFAR10_UNCOND, 32)],
  ids=["cifar10_uncond", "imagenet256_uncond", "cifar10_uncond_full_width"],
)
def test_unet_matches_the_reference(flags, size):
  ref = randomize(reference(flags), 0)
  model, info = openai_import.load_openai(ref.state_dict(), flags)
  assert model.config.learn_sigma and model.config.out_channels == 6
  x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
  # CIFAR-10 receives rescaled float timesteps (t * 1000 / 4000), ImageNet the integer t.
  t = np.array([289.5, 3.25], np.float32) if info["timestep_scale"] != 1 else np.array([145, 7])
  with torch.no_grad():
    want = ref(x, torch.as_tensor(t)).numpy()
  got = nchw(model, x, t)
  assert got.shape == want.shape == (2, 6, size, size)
  assert np.std(want) > 0.3  # outputs of order one: an absolute tolerance means something
  err = np.max(np.abs(got - want))
  # measured 4.5e-6 (CIFAR-10), 1.8e-5 (ImageNet-256), 3.0e-6 (CIFAR-10 at its full 128-channel
  # width: the 52.5M parameters of cifar10_uncond_50M_500K) on CPU
  assert err <= 1e-4, err
  # The default call returns the epsilon channels only.
  np.testing.assert_array_equal(nchw(model, x, t, full=False), got[:, :3])


def test_flags_give_the_configurations_schedules_and_timestep_scales():
  config, info = openai_import.config_from_flags(openai_import.CIFAR10_UNCOND)
  assert config.widths == (128, 256, 256, 256) and config.attention_resolutions == (2, 4)
  assert config.num_res_blocks == 3 and config.use_scale_shift_norm and not config.resblock_updown
  assert info["timestep_scale"] == 0.25
  config, info = openai_import.config_from_flags(openai_import.IMAGENET256_UNCOND)
  assert config.widths == (256, 256, 512, 512, 1024, 1024)
  assert config.attention_resolutions == (8, 16, 32) and config.num_head_channels == 64
  assert config.resblock_updown and info["timestep_scale"] == 1.0
  for name, steps in (("cosine", 4000), ("linear", 1000), ("linear", 250), ("cosine", 100)):
    betas = gd_diffusion.get_named_beta_schedule(name, steps)
    want = np.cumprod(1.0 - betas)
    got = diffusion.schedule_from({"kind": "openai", "name": name, "num_steps": steps})
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
  # The timesteps of the spec's table (cosine-4000 for CIFAR-10).
  cos = diffusion.cosine_schedule(4000)
  ts = [diffusion.timestep_for_sigma(cos, s) for s in (0.12, 0.25, 0.5, 1.0)]
  assert ts == [573, 1158, 1984, 2809]
  lin = diffusion.openai_schedule("linear", 1000)
  np.testing.assert_array_equal(lin, diffusion.linear_schedule())


@pytest.mark.parametrize(
  "flag, value",
  [("class_cond", True), ("predict_xstart", True), ("timestep_respacing", "250")],
)
def test_refused_flags_are_one_line_errors(flag, value):
  with pytest.raises(ValueError, match=f"OpenAI flag {flag}=.* is not supported") as err:
    openai_import.config_from_flags({**SMALL_CIFAR, flag: value})
  assert "\n" not in str(err.value)
  with pytest.raises(ValueError, match="unknown improved-diffusion flags"):
    openai_import.config_from_flags({**SMALL_CIFAR, "resblock_updown": True})
  with pytest.raises(ValueError, match="codebase"):
    openai_import.config_from_flags({"image_size": 32})


def test_one_step_denoiser_equals_the_reference_pred_xstart():
  """rsjax's one-step denoiser on y = x + delta is the reference diffusion's clipped pred_xstart
  at t* on q_sample(2x - 1, t*, eps) with eps = 2 sqrt(a) delta / sqrt(1 - a): schedule, the
  rescaled timestep and the learned-sigma split together."""
  flags = SMALL_CIFAR
  ref = randomize(reference(flags), 2)
  model, info = openai_import.load_openai(ref.state_dict(), flags)
  sched = diffusion.schedule_from(info["schedule"])
  fn, params = diffusion.one_step_denoiser(
    model, sigma=0.25, alphas_cumprod=sched, timestep_scale=info["timestep_scale"]
  )
  assert fn.t == 1158
  gdiff = gd_diffusion.GaussianDiffusion(
    betas=gd_diffusion.get_named_beta_schedule("cosine", 4000),
    model_mean_type=gd_diffusion.ModelMeanType.EPSILON,
    model_var_type=gd_diffusion.ModelVarType.LEARNED_RANGE,
    loss_type=gd_diffusion.LossType.RESCALED_MSE,
    rescale_timesteps=True,
  )
  g = torch.Generator().manual_seed(3)
  x = torch.rand(2, 3, 32, 32, generator=g)
  delta = 0.25 * torch.randn(x.shape, generator=g)
  a = sched[fn.t]
  eps = (2 * np.sqrt(a) / np.sqrt(1 - a)) * delta.double()
  t = torch.full((2,), fn.t, dtype=torch.long)
  with torch.no_grad():
    x_t = gdiff.q_sample(2 * x.double() - 1, t, noise=eps).float()
    want = gdiff.p_mean_variance(ref, x_t, t, clip_denoised=True)["pred_xstart"].numpy()
  y = jnp.asarray((x + delta).numpy().transpose(0, 2, 3, 1))
  got = 2 * np.asarray(jax.jit(fn)(params, y)).transpose(0, 3, 1, 2) - 1
  assert np.max(np.abs(got - want)) <= 1e-4


def test_openai_directory_loads_as_a_denoiser(tmp_path):
  import json

  from rsjax.models.denoise import workdir

  ref = randomize(reference(SMALL_CIFAR), 4)
  torch.save(ref.state_dict(), tmp_path / "model.pt")
  (tmp_path / openai_import.FLAGS_FILE).write_text(json.dumps(SMALL_CIFAR))
  fn, params, config = workdir.denoiser_fn(tmp_path, sigma=0.5)
  assert config["kind"] == "openai" and config["timestep"] == 1984
  assert fn.timestep_scale == 0.25 and fn.t == 1984
  y = jnp.full((1, 32, 32, 3), 0.5)
  assert np.asarray(fn(params, y)).shape == (1, 32, 32, 3)
  (tmp_path / openai_import.FLAGS_FILE).write_text(json.dumps({**SMALL_CIFAR, "num_res_blocks": 2}))
  with pytest.raises(ValueError, match="no parameter|leaves"):
    workdir.denoiser_fn(tmp_path, sigma=0.5)
