"""Denoised smoothing's cost: a one-step diffusion denoiser before a classifier, in the counts
engine, and Carlini et al.'s CIFAR-10 pipeline in rsjax against the same pipeline in PyTorch.

:func:`ddpm`: ``classifier(one_step_ddpm(x + delta))`` (``rsjax.models.denoise``) in
``rsjax.sample_counts``, random weights, one input, sigma 0.25 (t* = 145 on the linear
1000-step schedule): ``unet="cifar10"`` is google/ddpm-cifar10-32's UNet2DModel (35.7M
parameters) on 32x32x3 before ResNet-110; ``"small"`` a small DDPM UNet (widths 32, 64) on
28x28x1 before LeNet. Samples/s (best of ``reps``), the first call, and seconds per image at
N = 100,000, extrapolated unless ``num`` is 100,000.

:func:`carlini`: the improved-diffusion CIFAR-10 UNet (``cifar10_uncond_50M_500K``'s flags: 128
channels, 3 res blocks, learned sigma, cosine 4000 steps, timesteps rescaled), one step at sigma
0.25 (t* = 1158), a bicubic antialiased resize 32 -> 224, and a ViT-B/16 at 224 px
(``transformers``, 10 labels). Random weights, built in PyTorch (``guided_diffusion``'s
``UNetModel`` from ``guided-diffusion-sdk``, and ``transformers``) and imported into rsjax, so
both sides compute the same network: rsjax's ``sample_counts``, and the loop as Carlini et al.'s
code runs it (torch noise, ``q_sample`` / one-step ``pred_xstart``, ``F.interpolate``, ViT,
argmax, counts) under ``torch.no_grad``. Samples/s (best of ``reps``, after a warm-up) and
seconds per image at N = 100,000, extrapolated.
"""

from __future__ import annotations

import math
import time

import jax
import numpy as np

import rsjax
from benchmarks.measure import dump_json
from rsjax import models
from rsjax.models.denoise import denoised, diffusion, openai_import
from rsjax.models.denoise import unet as unet_lib

__all__ = ["CIFAR10_UNET", "carlini", "ddpm"]

N_CERT = 100_000
N0 = 100
SIGMA = 0.25

CIFAR10_UNET = unet_lib.UNetConfig(
  in_channels=3,
  out_channels=3,
  block_out_channels=(128, 256, 256, 256),
  layers_per_block=2,
  down_block_types=("DownBlock2D", "AttnDownBlock2D", "DownBlock2D", "DownBlock2D"),
  up_block_types=("UpBlock2D", "UpBlock2D", "AttnUpBlock2D", "UpBlock2D"),
  downsample_padding=0,
  flip_sin_to_cos=False,
  freq_shift=1,
  norm_num_groups=32,
  norm_eps=1e-6,
  attention_head_dim=None,
)
SMALL_UNET = unet_lib.UNetConfig(
  in_channels=1,
  out_channels=1,
  block_out_channels=(32, 64),
  layers_per_block=1,
  down_block_types=("DownBlock2D", "AttnDownBlock2D"),
  up_block_types=("AttnUpBlock2D", "UpBlock2D"),
  norm_num_groups=8,
)
TINY_UNET = unet_lib.UNetConfig(
  in_channels=1, out_channels=1, block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=4
)
SETUPS = {
  "cifar10": (CIFAR10_UNET, "resnet110", (32, 32, 3)),
  "small": (SMALL_UNET, "lenet", (28, 28, 1)),
  "tiny": (TINY_UNET, "mlp", (8, 8, 1)),
}  # the smoke test


def _timed_counts(apply_fn, params, x, *, num: int, batch_size, reps: int):
  """``(first, times)``: seconds of a first (compiling) ``rsjax.sample_counts`` call of ``num``
  samples of ``x`` at ``SIGMA``, then of ``reps`` more, each on its own key."""

  def counts(seed: int) -> np.ndarray:
    c = rsjax.sample_counts(
      jax.random.key(seed),
      apply_fn,
      params,
      x,
      sigma=SIGMA,
      num_classes=10,
      num=num,
      batch_size=batch_size,
    )
    return np.asarray(c)

  t = time.perf_counter()
  counts(10_000)
  first = time.perf_counter() - t
  times = []
  for r in range(reps):
    t = time.perf_counter()
    c = counts(r)
    times.append(time.perf_counter() - t)
  assert int(c.sum()) == num
  return first, times


def ddpm_rate(name: str, *, num: int, reps: int, batch_size: int, log=print) -> dict:
  """Samples/s of the composed DDPM pipeline ``name`` of ``SETUPS``."""
  config, classifier, shape = SETUPS[name]
  ddpm = unet_lib.UNet2DModel(config, rngs=0)
  denoise_fn, d_params = diffusion.one_step_denoiser(
    ddpm, sigma=SIGMA, alphas_cumprod=diffusion.linear_schedule()
  )
  clf = models.create_model(classifier, num_classes=10, input_shape=shape, rngs=0)
  c_fn, c_params = models.to_apply_fn(clf)
  apply_fn, params = denoised(
    denoise_fn, c_fn, denoiser_params=d_params, classifier_params=c_params
  )
  x = np.random.default_rng(0).random((1,) + shape, dtype=np.float32)

  first, times = _timed_counts(apply_fn, params, x, num=num, batch_size=batch_size, reps=reps)
  rate = num / min(times)
  res = {
    "unet": name,
    "classifier": classifier,
    "input_shape": list(shape),
    "unet_params": models.count_params(ddpm),
    "timestep": denoise_fn.t,
    "num": num,
    "batch_size": batch_size,
    "first_call_s": first,
    "samples_per_s": rate,
    "median_samples_per_s": num / float(np.median(times)),
    "s_per_image_at_N100000": (N0 + N_CERT) / rate,
    "s_per_image_kind": "measured" if num == N_CERT else f"extrapolated from N={num}",
    "device": str(jax.devices()[0].device_kind),
    "jax": jax.__version__,
  }
  log(
    f"{name}: {res['unet_params']:,} UNet parameters + {classifier}; {rate:.1f} samples/s "
    f"(best of {reps}); {res['s_per_image_at_N100000']:.0f} s per image at N = 100,000 "
    f"({res['s_per_image_kind']}); first call {first:.1f} s"
  )
  return res


def ddpm(
  *, unet: str = "small", num: int = 2000, reps: int = 2, batch_size: int = 500,
  json: str | None = None,
) -> dict:  # fmt: skip
  """:func:`ddpm_rate` of ``unet`` ("small", "tiny", "cifar10"); writes ``json``."""
  res = ddpm_rate(unet, num=num, reps=reps, batch_size=batch_size)
  dump_json(json, res)
  return res


VIT_B16 = dict(
  hidden_size=768,
  num_hidden_layers=12,
  num_attention_heads=12,
  intermediate_size=3072,
  image_size=224,
  patch_size=16,
  num_labels=10,
)


def build(small: bool = False):
  """``(unet, vit, flags)`` in PyTorch with random weights (``small``: for the smoke test)."""
  import torch
  import transformers
  from guided_diffusion.unet import UNetModel

  flags = dict(openai_import.CIFAR10_UNCOND)
  vit_cfg = dict(VIT_B16)
  if small:
    flags["num_channels"] = 32
    vit_cfg.update(hidden_size=32, num_hidden_layers=1, num_attention_heads=2)
    vit_cfg.update(intermediate_size=64, image_size=64)
  cfg, _ = openai_import.config_from_flags(flags)
  torch.manual_seed(0)
  unet = UNetModel(
    image_size=32,
    in_channels=3,
    model_channels=cfg.model_channels,
    out_channels=cfg.out_channels,
    num_res_blocks=cfg.num_res_blocks,
    attention_resolutions=cfg.attention_resolutions,
    dropout=0.3,
    channel_mult=cfg.channel_mult,
    num_heads=cfg.num_heads,
    use_scale_shift_norm=True,
  ).eval()
  with torch.no_grad():  # the reference zero-initializes its output convs
    for p in unet.parameters():
      if p.abs().max() == 0 and p.ndim > 1:
        p.normal_(0, 0.02)
  vit = transformers.ViTForImageClassification(transformers.ViTConfig(**vit_cfg)).eval()
  return unet, vit, flags


def rsjax_rate(unet, vit, flags, *, num: int, batch_size: int, reps: int) -> dict:
  model, info = openai_import.load_openai(unet.state_dict(), flags)
  sched = diffusion.schedule_from(info["schedule"])
  fn, d_params = diffusion.one_step_denoiser(
    model, sigma=SIGMA, alphas_cumprod=sched, timestep_scale=info["timestep_scale"]
  )
  clf = models.vit_from_transformers(vit)
  size = clf.config.image_size
  apply_fn, params = denoised(fn, clf, denoiser_params=d_params, resize=(size, size))
  x = np.random.default_rng(0).random((1, 32, 32, 3), dtype=np.float32)

  first, times = _timed_counts(apply_fn, params, x, num=num, batch_size=batch_size, reps=reps)
  return {"samples_per_s": num / min(times), "first_call_s": first, "timestep": fn.t}


def torch_rate(unet, vit, flags, *, num: int, batch_size: int, reps: int, device: str) -> dict:
  import torch
  import torch.nn.functional as F
  from guided_diffusion import gaussian_diffusion as gd

  _, info = openai_import.config_from_flags(flags)
  steps = info["schedule"]["num_steps"]
  gdiff = gd.GaussianDiffusion(
    betas=gd.get_named_beta_schedule(info["schedule"]["name"], steps),
    model_mean_type=gd.ModelMeanType.EPSILON,
    model_var_type=gd.ModelVarType.LEARNED_RANGE,
    loss_type=gd.LossType.RESCALED_MSE,
    rescale_timesteps=info["timestep_scale"] != 1.0,
  )
  t_star = diffusion.timestep_for_sigma(diffusion.schedule_from(info["schedule"]), SIGMA)
  unet, vit = unet.to(device), vit.to(device)
  size = vit.config.image_size
  x = torch.rand(1, 3, 32, 32, device=device)

  def counts() -> np.ndarray:
    c = torch.zeros(10, dtype=torch.long, device=device)
    with torch.no_grad():
      for start in range(0, num, batch_size):
        b = min(batch_size, num - start)
        xb = x.repeat(b, 1, 1, 1) * 2 - 1
        t = torch.full((b,), t_star, dtype=torch.long, device=device)
        x_t = gdiff.q_sample(xb, t, noise=torch.randn_like(xb))
        x0 = gdiff.p_mean_variance(unet, x_t, t, clip_denoised=True)["pred_xstart"]
        up = F.interpolate(x0, size=(size, size), mode="bicubic", antialias=True)
        logits = vit(pixel_values=up).logits
        c += torch.bincount(logits.argmax(1), minlength=10)
    return c.cpu().numpy()

  t = time.perf_counter()
  counts()
  first = time.perf_counter() - t
  times = []
  for _ in range(reps):
    t = time.perf_counter()
    c = counts()
    times.append(time.perf_counter() - t)
  assert int(c.sum()) == num
  return {"samples_per_s": num / min(times), "first_call_s": first, "timestep": t_star}


def carlini(
  *,
  num: int = 32,
  batch_size: int = 16,
  reps: int = 1,
  device: str = "cpu",
  small: bool = False,
  json: str | None = None,
) -> dict:
  """rsjax against PyTorch on Carlini et al.'s pipeline (``device``: torch's, cpu or cuda;
  ``small``: tiny widths, the smoke test); writes ``json``."""
  import torch

  unet, vit, flags = build(small)
  ours = rsjax_rate(unet, vit, flags, num=num, batch_size=batch_size, reps=reps)
  ref = torch_rate(unet, vit, flags, num=num, batch_size=batch_size, reps=reps, device=device)
  res = {
    "pipeline": "improved-diffusion CIFAR-10 UNet (one step) + bicubic 32->224 + ViT-B/16"
    + (" (small smoke variant)" if small else ""),
    "unet_params": sum(p.numel() for p in unet.parameters()),
    "classifier_params": sum(p.numel() for p in vit.parameters()),
    "num": num,
    "batch_size": batch_size,
    "reps": reps,
    "rsjax": ours,
    "torch": ref,
    "rsjax_over_torch": ours["samples_per_s"] / ref["samples_per_s"],
    "s_per_image_at_N100000": {
      k: (N0 + N_CERT) / v["samples_per_s"] for k, v in (("rsjax", ours), ("torch", ref))
    },
    "s_per_image_kind": f"extrapolated from N={num}",
    "device": str(jax.devices()[0].device_kind),
    "jax": jax.__version__,
    "torch_version": torch.__version__,
    "torch_threads": torch.get_num_threads(),
  }
  for k in ("rsjax", "torch"):
    s = res["s_per_image_at_N100000"][k]
    print(
      f"{k}: {res[k]['samples_per_s']:.2f} samples/s, {s:,.0f} s per image at N = 100,000 "
      f"({s / 3600:.1f} h), first call {res[k]['first_call_s']:.1f} s"
    )
  print(f"rsjax / torch: {res['rsjax_over_torch']:.2f}x; t* = {ours['timestep']}")
  assert ours["timestep"] == ref["timestep"] and math.isfinite(res["rsjax_over_torch"])
  dump_json(json, res)
  return res
