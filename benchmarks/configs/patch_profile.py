"""Issue 72, item 5: where derandomized smoothing's time goes on the CPU (LeNet-5 of encoded
digits, column ablation), in rsjax and in PyTorch (ART's framework), and the most that
skipping the constant part of each band's forward could save.

    JAX_PLATFORMS=cpu python -m benchmarks.run --config benchmarks/configs/patch_profile.py

Figures: benchmarks/RESULTS.md, "Issue 72, item 5: where the time goes".
"""


def get_config() -> dict:
  return {
    "workload": "rsjax's LeNet-5 of 28x28x2 encoded digits, random weights, column band of 2",
    "arms": ["rsjax (XLA:CPU), batch 1000", "PyTorch eager (oneDNN), batch 128 and 1000"],
    "measures": [
      "ms per 1000 forward passes per layer, median of 7 alternated rounds",
      "the bound of a forward computing only the band's columns",
    ],
    "call": "benchmarks.patch_profile.patch_profile",
    "args": {"size": 2, "batch": 1000, "torch_batch": 128, "rounds": 7},
    "json": "benchmarks/results/patch_profile_cpu.json",
  }
