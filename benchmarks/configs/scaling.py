"""Counts and throughput over forced CPU devices (one fresh process per device count).

    python -m benchmarks.run --config benchmarks/configs/scaling.py

Figure (RESULTS.md, "Scaling over forced CPU devices"; 2-core CPU, printed): samples/s with 1
and 2 devices, and the counts equal across device counts (the run fails otherwise).
"""


def get_config() -> dict:
  return {
    "workload": "LeNet, random weights, N = 20,000",
    "arms": ["1 device", "2 devices"],
    "measures": ["samples/s", "counts equal"],
    "call": "benchmarks.throughput.scaling",
    "args": {"model": "lenet", "num": 20_000, "devices": "1,2", "reps": 3},
    "json": "runs/scaling.json",
    "json_arg": None,
  }
