"""Every diffusers scheduler field that changes the one-step denoiser is applied or refused."""

import json

import numpy as np
import pytest

from rsjax.models.denoise import diffusion, schedules

CASES = [
  {"beta_schedule": "linear"},
  {"beta_schedule": "scaled_linear", "beta_start": 0.00085, "beta_end": 0.012},
  {"beta_schedule": "squaredcos_cap_v2"},
  {"beta_schedule": "linear", "rescale_betas_zero_snr": True},
  {"num_train_timesteps": 500, "beta_start": 2e-4, "beta_end": 0.04},
  {"trained_betas": np.linspace(1e-4, 0.03, 800).tolist()},
]


@pytest.mark.parametrize("fields", CASES, ids=lambda f: "-".join(map(str, f))[:40])
def test_schedules_equal_diffusers(fields):
  diffusers = pytest.importorskip("diffusers")
  pytest.importorskip("torch")
  ref = diffusers.DDPMScheduler(**fields)
  want = ref.alphas_cumprod.double().numpy()
  config = {"_class_name": "DDPMScheduler", **dict(ref.config)}
  got = np.asarray(schedules.diffusers_schedule(config)["alphas_cumprod"])
  assert got.shape == want.shape
  np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-7)  # diffusers works in float32
  for sigma in (0.12, 0.25, 0.5, 1.0):
    assert diffusion.timestep_for_sigma(got, sigma) == diffusion.timestep_for_sigma(want, sigma)


def test_zero_snr_and_trained_betas_change_the_timestep():
  plain = schedules.diffusers_schedule({})["alphas_cumprod"]
  zero = schedules.diffusers_schedule({"rescale_betas_zero_snr": True})["alphas_cumprod"]
  assert diffusion.timestep_for_sigma(plain, 0.25) == 145
  # Zero terminal SNR moves t* (values equal to diffusers' own schedule, test above).
  assert [diffusion.timestep_for_sigma(zero, s) for s in (0.25, 1.0)] == [144, 394]
  assert zero[-1] == pytest.approx(0.0, abs=1e-12)
  betas = np.full(300, 0.01)
  trained = schedules.diffusers_schedule({"trained_betas": betas.tolist()})
  np.testing.assert_allclose(trained["alphas_cumprod"], np.cumprod(1 - betas), rtol=1e-12)
  # squaredcos_cap_v2 is the improved-diffusion cosine schedule.
  cos = schedules.diffusers_schedule({"beta_schedule": "squaredcos_cap_v2"})["alphas_cumprod"]
  np.testing.assert_allclose(cos, diffusion.cosine_schedule(1000), rtol=1e-12)
  s = schedules.diffusers_schedule({"clip_sample": False, "variance_type": "learned_range"})
  assert not s["clip"] and s["learned_variance"]
  ignored = {"timestep_spacing": "trailing", "steps_offset": 1, "set_alpha_to_one": False}
  assert schedules.diffusers_schedule(ignored)["alphas_cumprod"] == plain


@pytest.mark.parametrize(
  "fields, match",
  [
    ({"beta_schedule": "sigmoid"}, "beta_schedule 'sigmoid' is not supported"),
    ({"prediction_type": "v_prediction"}, "prediction_type 'v_prediction'"),
    ({"thresholding": True}, "thresholding"),
    ({"clip_sample_range": 2.0}, "clip_sample_range"),
    ({"karras_sigmas": True}, r"fields \['karras_sigmas'\] are not supported"),
    ({"_class_name": "EulerDiscreteScheduler"}, "EulerDiscreteScheduler"),
    ({"trained_betas": [0.5]}, "trained_betas"),
  ],
)
def test_refused_fields_are_one_line_errors(fields, match):
  with pytest.raises(ValueError, match=match) as err:
    schedules.diffusers_schedule(fields, where="x/scheduler_config.json")
  assert "\n" not in str(err.value) and str(err.value).startswith("x/scheduler_config.json: ")


def _unet_dir(tmp_path, diffusers, out_channels=3):
  import torch

  torch.manual_seed(0)
  ref = diffusers.UNet2DModel(
    sample_size=8,
    in_channels=3,
    out_channels=out_channels,
    block_out_channels=(8, 16),
    layers_per_block=1,
    down_block_types=("DownBlock2D", "AttnDownBlock2D"),
    up_block_types=("AttnUpBlock2D", "UpBlock2D"),
    norm_num_groups=4,
  ).eval()
  ref.save_pretrained(tmp_path)
  return ref


def test_diffusers_directory_schedule_is_read_or_refused(tmp_path):
  diffusers = pytest.importorskip("diffusers")
  torch = pytest.importorskip("torch")
  from rsjax.models.denoise import workdir

  ref = _unet_dir(tmp_path, diffusers, out_channels=6)
  with pytest.raises(ValueError, match="no scheduler_config.json"):
    workdir.denoiser_fn(tmp_path, sigma=0.25)
  sched = {"_class_name": "DDPMScheduler", "rescale_betas_zero_snr": True}
  (tmp_path / "scheduler_config.json").write_text(json.dumps(sched))
  with pytest.raises(ValueError, match="6 output channels for 3 input channels"):
    workdir.denoiser_fn(tmp_path, sigma=0.25)
  sched["variance_type"] = "learned_range"
  (tmp_path / "scheduler_config.json").write_text(json.dumps(sched))
  fn, params, config = workdir.denoiser_fn(tmp_path, sigma=0.25)
  assert config["timestep"] == 144 and config["eps_channels"] == 3
  # The denoiser uses the UNet's first three output channels as epsilon.
  y = np.random.default_rng(0).random((2, 8, 8, 3)).astype(np.float32)
  a = fn.alpha_bar
  x_t = (np.sqrt(a) * (2 * y - 1)).astype(np.float32)
  with torch.no_grad():
    eps = ref(torch.as_tensor(x_t.transpose(0, 3, 1, 2)), 144).sample[:, :3].numpy()
  want = np.clip((x_t - np.sqrt(1 - a) * eps.transpose(0, 2, 3, 1)) / np.sqrt(a), -1, 1)
  np.testing.assert_allclose(np.asarray(fn(params, y)), (want + 1) / 2, atol=1e-4)
