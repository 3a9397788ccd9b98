"""Throughput of the denoised-smoothing pipeline: one-step diffusion denoiser + classifier.

The composed base classifier ``classifier(one_step_ddpm(x + delta))``
(``rsjax.models.denoise``) in the counts engine (``rsjax.sample_counts``), random weights, one input,
sigma = 0.25 (t* = 145 on the linear 1000-step schedule):

* ``--unet cifar10``: the UNet2DModel configuration of google/ddpm-cifar10-32 (35.7M
  parameters; ``rsjax.models.denoise.diffusers_import`` loads its weights), CIFAR-shaped 32x32x3
  input, before ResNet-110 (Cohen et al.'s CIFAR classifier; Carlini et al. use a ViT-B/16 at
  224 px, which is far costlier);
* ``--unet small``: a small DDPM UNet (widths 32, 64) on 28x28x1, before LeNet.

Reports samples per second (steady state, best of ``--reps``), the compile time, and seconds
per certified image at N = 100,000 (n0 = 100 plus N), extrapolated from the measured rate
unless ``--num`` is 100,000.

Commands::

  python -m benchmarks.denoised --unet small --num 2000
  python -m benchmarks.denoised --unet cifar10 --num 100 --batch-size 50 --reps 1 \
      --json benchmarks/results/denoised_cifar10_cpu.json

Measured (2026-11-24, 2 AMD EPYC cores shared with other jobs, JAX 0.10.2 CPU, the command
above): google/ddpm-cifar10-32's UNet + ResNet-110, 6.0 samples/s, i.e. about 16,700 s (4.6 h)
per CIFAR image at N = 100,000 (extrapolated from N = 100; one repetition on a loaded machine,
so a rough figure). No accelerator run was made; Carlini et al. report about 121 s per image on
an A100 with a ViT-B/16 classifier.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

import rsjax
from rsjax import models
from rsjax.models.denoise import denoised, diffusion, unet

N_CERT = 100_000
N0 = 100
SIGMA = 0.25

CIFAR10_UNET = unet.UNetConfig(
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
SMALL_UNET = unet.UNetConfig(
  in_channels=1,
  out_channels=1,
  block_out_channels=(32, 64),
  layers_per_block=1,
  down_block_types=("DownBlock2D", "AttnDownBlock2D"),
  up_block_types=("AttnUpBlock2D", "UpBlock2D"),
  norm_num_groups=8,
)
TINY_UNET = unet.UNetConfig(
  in_channels=1, out_channels=1, block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=4
)
SETUPS = {
  "cifar10": (CIFAR10_UNET, "resnet110", (32, 32, 3)),
  "small": (SMALL_UNET, "lenet", (28, 28, 1)),
  "tiny": (TINY_UNET, "mlp", (8, 8, 1)),
}  # the smoke test


def run(name: str, *, num: int, reps: int, batch_size: int, log=print) -> dict:
  config, classifier, shape = SETUPS[name]
  ddpm = unet.UNet2DModel(config, rngs=0)
  denoise_fn, d_params = diffusion.one_step_denoiser(
    ddpm, sigma=SIGMA, alphas_cumprod=diffusion.linear_schedule()
  )
  clf = models.create_model(classifier, num_classes=10, input_shape=shape, rngs=0)
  c_fn, c_params = models.to_apply_fn(clf)
  apply_fn, params = denoised(
    denoise_fn, c_fn, denoiser_params=d_params, classifier_params=c_params
  )
  x = np.random.default_rng(0).random((1,) + shape, dtype=np.float32)

  def counts(seed):
    return rsjax.sample_counts(
      jax.random.key(seed),
      apply_fn,
      params,
      x,
      sigma=SIGMA,
      num_classes=10,
      num=num,
      batch_size=batch_size,
    )

  t = time.perf_counter()
  counts(10_000)
  first = time.perf_counter() - t
  times = []
  for r in range(reps):
    t = time.perf_counter()
    c = counts(r)
    times.append(time.perf_counter() - t)
  assert int(np.asarray(c).sum()) == num
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


def main(argv=None) -> dict:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--unet", default="small", choices=list(SETUPS))
  p.add_argument("--num", type=int, default=2000, help="samples per timed call")
  p.add_argument("--reps", type=int, default=2)
  p.add_argument("--batch-size", type=int, default=500)
  p.add_argument("--json", default=None, help="write the measurement here")
  args = p.parse_args(argv)
  res = run(args.unet, num=args.num, reps=args.reps, batch_size=args.batch_size)
  if args.json:
    with open(args.json, "w") as f:
      json.dump(res, f, indent=1)
  return res


if __name__ == "__main__":
  main()
