"""The fixed cost of one ``rsjax.certify`` call on one image (n0 = N = 100), and where it goes.

    python -m benchmarks.run --config benchmarks/configs/per_call.py

Figure (RESULTS.md, "Per-call overhead"; 2-core CPU, printed, no JSON kept): LeNet 3.51-3.80 ms
a call after the change (fixed part 0.67-0.94 ms), ResNet-110 at n0 = N = 1 11.0-14.0 ms. Runs
the MLP, LeNet and ResNet-110 in turn; ``--set`` one ``args`` list to run fewer.
"""


def get_config() -> dict:
  return {
    "workload": "one image, random weights, batch auto, one device",
    "arms": ["the whole call", "its engine programs replayed", "the rest (fixed)"],
    "measures": ["wall and CPU ms per call", "compiles and waits of a warm call", "phases"],
    "call": "benchmarks.calls.per_call",
    "args": [
      {"model": "mlp", "reps": 60, "profile_calls": 30, "json": "runs/per_call_mlp.json"},
      {"model": "lenet", "reps": 60, "profile_calls": 30, "json": "runs/per_call_lenet.json"},
      {"model": "resnet110", "n0": 1, "num": 1, "json": "runs/per_call_resnet110.json"},
    ],
    "json": "runs/per_call.json",
  }
