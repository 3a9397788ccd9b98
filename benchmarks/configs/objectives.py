"""Issue 13: one training step of each objective relative to Gaussian training, in one run.

    python -m benchmarks.run --config benchmarks/configs/objectives.py

Figure (RESULTS.md, "Issue 13"; 2-core CPU): ms per step and the ratio to Gaussian training of
Consistency, SmoothAdv, MACER and the sphere attack. Writes
``benchmarks/results/objectives.json``.
"""


def get_config() -> dict:
  return {
    "workload": "LeNet on the first digits of mnist5k, two epochs, the second timed",
    "arms": ["Gaussian m=1", "Gaussian m=4", "Consistency", "SmoothAdv", "MACER", "sphere attack"],
    "measures": ["ms per step", "ratio to Gaussian (same m, m = 1)"],
    "call": "benchmarks.quality.objectives",
    "args": {},
    "json": "benchmarks/results/objectives.json",
  }
