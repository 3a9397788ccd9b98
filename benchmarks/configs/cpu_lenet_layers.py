"""Issue 66: LeNet-5's forward on the CPU cut at its layers, and its second convolution padded
past XLA:CPU's YNNPACK cutoff (more than 16 channels).

    JAX_PLATFORMS=cpu python -m benchmarks.run --config benchmarks/configs/cpu_lenet_layers.py

Figures: benchmarks/RESULTS.md, "Issue 66: the compiled twin on a quiet CPU".
"""


def get_config() -> dict:
  return {
    "workload": "rsjax's LeNet-5, random weights, 28x28x1, batch 1000",
    "arms": [
      "the forward's parts, one jitted program each",
      "the 6 -> 16 convolution with its channels zero-padded to 17, 24 or 32 (YNNPACK)",
    ],
    "measures": ["ms per 1000 samples, median and min of 7 alternated rounds"],
    "call": "benchmarks.cpu_lenet_layers.lenet_layers",
    "args": {"batch": 1000, "rounds": 7},
    "json": "benchmarks/results/cpu_lenet_layers.json",
  }
