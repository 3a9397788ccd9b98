"""Where one certification's time goes on this device: noise, forward, counting, launch, host
statistics; the 3x3 convolutions per stage, XLA (NHWC, NCHW) against PyTorch.

    python -m benchmarks.run --config benchmarks/configs/profile.py

Figures (RESULTS.md, "ResNet-110 on CPU: where the time goes" and issue 24's profile; 2-core CPU,
printed, no JSON kept). The noise streams alone (M normals/s): ``--set args.noise=true``.
"""


def get_config() -> dict:
  return {
    "workload": "ResNet-110, one input, the engine's batch, N = 208",
    "arms": ["engine", "noise", "forward", "counting", "XLA NHWC/NCHW and PyTorch convolutions"],
    "measures": ["wall and CPU s, best of reps"],
    "call": "benchmarks.profile.profile",
    "args": {"model": "resnet110", "num": 208, "reps": 2},
    "json": "runs/profile.json",
  }
