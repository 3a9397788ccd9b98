"""Start-up of the ``rsjax`` command for the commands that need no device.

    python -m benchmarks.run --config benchmarks/configs/startup.py

Figure (benchmarks/RESULTS.md, "Start-up"): min / median / max wall seconds of five rounds,
each command a fresh process, and whether it imported JAX.
"""


def get_config() -> dict:
  return {
    "workload": "rsjax --version, --help, train --help, certify --help, verify --help, verify and analyze of "
    "a committed 100-row run",
    "arms": ["each command as a fresh process"],
    "measures": ["wall s (min, median, max of 5 rounds)", "imports JAX"],
    "call": "benchmarks.startup.startup",
    "args": {"rounds": 5},
    "json": "benchmarks/results/startup.json",
  }
