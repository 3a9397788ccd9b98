"""Derandomized smoothing with a ViT: token dropping against the full encoded image (issue 72,
item 3), the same model and images, the three arms alternated in one run.

    python -m benchmarks.run --config benchmarks/configs/token_dropping.py

Figure (benchmarks/RESULTS.md, "Issue 72: token dropping"): certified images per second of each
arm, the speed-up of dropping, whether the dropped counts equal the masked full image's.
"""


def get_config() -> dict:
  return {
    "workload": "a ViT (192 wide, 6 blocks, patch 4, random weights) certifying 32 MNIST-shaped "
    "images by column ablation of width 4 (28 positions)",
    "arms": ["full encoded image", "full image, ablated tokens masked", "tokens dropped"],
    "measures": ["certified images/s (best, median)", "speed-up", "counts equal"],
    "call": "benchmarks.ablation.token_dropping",
    "args": {"images": 32, "rounds": 5, "size": 4, "patch": 4},
    "json": "benchmarks/results/token_dropping_cpu.json",
  }
