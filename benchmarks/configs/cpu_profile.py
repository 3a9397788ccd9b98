"""Issue 66, item 1: a profile of the sampling loop on the CPU per model (LeNet, ResNet-20,
ResNet-110), rsjax against its PyTorch twin eager and under ``torch.compile``: noise draw,
forward, counting, one step, the whole pass, loop and host overhead, XLA's own breakdown by
kind of work, LeNet cut at its layers, and the A/B variants (XLA flags, NHWC/NCHW, im2col,
bfloat16, the library's batch norm folding and narrow-stage packing).

    JAX_PLATFORMS=cpu python -m benchmarks.run --config benchmarks/configs/cpu_profile.py
    JAX_PLATFORMS=cpu python -m benchmarks.run --config benchmarks/configs/cpu_profile.py \
      --set args.sections=flags,levers --set args.update=true

Figures (RESULTS.md, "CPU profile of the sampling loop"; the shared 2-core CPU at a load average
of 13.7 to 5.8, 2829 s, then 265 s): rsjax's pass 1.15x to 1.68x the compiled twin's on LeNet
(its Eigen 6->16 convolution 2.6x oneDNN's), 1.34x to 1.55x on ResNet-20, where Eigen runs the
16-channel stage (56% of the forward) and packing it by 2 with batch norm folded makes the
forward 0.74x. ``--set args.sections=profile`` the table alone, ``--set args.models=lenet`` one
model. Writes ``benchmarks/results/cpu_profile.json``.
"""


def get_config() -> dict:
  return {
    "workload": "LeNet (batches 64, 256, 1000), ResNet-20 and ResNet-110 (64, 256, 512); "
    "one input, sigma 0.25, random weights",
    "arms": [
      "rsjax (the engine's functions, its compiled loop, rsjax.sample_counts)",
      "the PyTorch twin, eager, at 1 and 2 threads (ResNet-110: 1)",
      "the twin under torch.compile (default mode), at 1 and 2 threads (ResNet-110: 1)",
    ],
    "measures": [
      "ms per 1000 samples (min/median/max over alternated rounds): noise, forward, count, "
      "step, pass; loop and host overhead",
      "XLA:CPU ms per 1000 samples by kind of work and by runtime (trace)",
      "A/B: XLA_FLAGS, NHWC/NCHW, im2col, float32/bfloat16, batch norm folded, packed by 2/4",
    ],
    "call": "benchmarks.cpu_profile.cpu_profile",
    # ResNet-110's twin at 1 thread only: at 2 threads on a loaded 2-core machine each of its
    # timings takes minutes (ResNet-20 and LeNet show what the second thread does).
    "args": {"torch_threads": {"lenet": [1, 2], "resnet20": [1, 2], "resnet110": [1]}},
    "json": "benchmarks/results/cpu_profile.json",
  }
