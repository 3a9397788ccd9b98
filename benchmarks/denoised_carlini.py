"""Carlini et al.'s CIFAR-10 pipeline, rsjax against the same pipeline in PyTorch.

The improved-diffusion CIFAR-10 UNet (``cifar10_uncond_50M_500K``'s flags: 128 channels, 3 res
blocks, learned sigma, cosine 4000 steps, timesteps rescaled), one step at sigma = 0.25
(t* = 1158, the UNet receives 289.5), a bicubic antialiased resize 32 -> 224, and a ViT-B/16
at 224 px (transformers ``ViTForImageClassification``, 10 labels). Random weights, built in
PyTorch (the reference packages: ``guided_diffusion``'s ``UNetModel`` from PyPI's
``guided-diffusion-sdk`` and ``transformers``) and imported into rsjax, so both sides compute
the same network.

* rsjax: ``rsjax.sample_counts`` on one input (noise, denoise, resize, classify, count) at the
  given step size.
* PyTorch: the same loop written as Carlini et al.'s code runs it (noise drawn in torch, the
  reference diffusion's ``q_sample`` / one-step ``pred_xstart``, ``F.interpolate`` bicubic
  antialiased, ViT, argmax, counts), under ``torch.no_grad``.

Reports samples per second (best of ``--reps``, after a warm-up call) and seconds per image at
N = 100,000 (n0 = 100 plus N), extrapolated from the measured rate.

Commands (the reference side needs ``pip install guided-diffusion-sdk transformers`` beside
torch)::

  python -m benchmarks.denoised_carlini --num 32 --batch-size 16 --reps 1 \
      --json benchmarks/results/denoised_carlini_cpu.json
  # on a GPU (JAX with CUDA, torch with CUDA):
  python -m benchmarks.denoised_carlini --num 10000 --batch-size 1000 --reps 2 --device cuda
"""

from __future__ import annotations

import argparse
import json
import math
import time

import jax
import numpy as np

import rsjax
from rsjax import models
from rsjax.models.denoise import denoised, diffusion, openai_import

N_CERT = 100_000
N0 = 100
SIGMA = 0.25
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

  def counts(seed: int):
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


def run(*, num: int, batch_size: int, reps: int, device: str = "cpu", small: bool = False):
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
  return res


def main(argv=None) -> dict:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--num", type=int, default=32, help="samples per timed call")
  p.add_argument("--batch-size", type=int, default=16)
  p.add_argument("--reps", type=int, default=1)
  p.add_argument("--device", default="cpu", help="torch device (cpu or cuda)")
  p.add_argument("--small", action="store_true", help="tiny widths (the smoke test)")
  p.add_argument("--json", default=None, help="write the measurement here")
  args = p.parse_args(argv)
  res = run(
    num=args.num, batch_size=args.batch_size, reps=args.reps, device=args.device, small=args.small
  )
  if args.json:
    with open(args.json, "w") as f:
      json.dump(res, f, indent=1)
  return res


if __name__ == "__main__":
  main()
