"""Denoised smoothing's cost in the counts engine: google/ddpm-cifar10-32's UNet (one step) before
ResNet-110, random weights, on a CPU.

    python -m benchmarks.run --config benchmarks/configs/ddpm.py

Figure (RESULTS.md, "Denoised smoothing: one-step DDPM + ResNet-110"; 2 cores shared with other
jobs, one repetition, a rough figure): 6.0 samples/s, about 16,700 s (4.6 h) per CIFAR image at
N = 100,000, extrapolated from N = 100. Writes ``benchmarks/results/denoised_cifar10_cpu.json``.
``--set args.unet=small --set args.num=2000``: the small UNet before LeNet.
"""


def get_config() -> dict:
  return {
    "workload": "one CIFAR-shaped input, random weights, sigma 0.25 (t* = 145), N = 100 timed",
    "arms": ["UNet2DModel (35.7M parameters, one step) + ResNet-110 in rsjax.sample_counts"],
    "measures": ["samples/s", "s per image at N = 100,000 (extrapolated)", "first call s"],
    "call": "benchmarks.denoised.ddpm",
    "args": {"unet": "cifar10", "num": 100, "batch_size": 50, "reps": 1},
    "json": "benchmarks/results/denoised_cifar10_cpu.json",
  }
