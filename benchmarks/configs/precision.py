"""bfloat16 against float32 certification of a trained LeNet, same inputs and noise.

    python -m benchmarks.run --config benchmarks/configs/precision.py

Figure (RESULTS.md, "bfloat16 versus float32"; 2-core CPU, printed, no JSON kept): certified
accuracy per radius in both precisions, and the noisy samples whose class changed.
"""


def get_config() -> dict:
  return {
    "workload": "the demo LeNet (benchmarks.measure.demo_model) trained 3 epochs, 40 test digits, N = 4,000",
    "arms": ["float32", "bfloat16"],
    "measures": ["certified accuracy by radius", "changed samples"],
    "call": "benchmarks.quality.precision",
    "args": {"model": "lenet", "epochs": 3, "images": 40, "n": 4000},
    "json": "runs/precision.json",
  }
