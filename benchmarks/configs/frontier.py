"""Issue 40's frontier: ``Anytime``'s (mixture_share, agree_weight) trade-off on the streams, and
the most the MNIST benchmark's ratio could reach at each setting.

    python -m benchmarks.run --config benchmarks/configs/frontier.py

Figure (RESULTS.md, issue 40, after the settings table; 136 s on a 2-core CPU): at share 0.6 the
decide-floor ratio 1.14x, 1.15x, 1.19x, 1.245x, 1.41x for weights 0, 0.5, 0.75, 0.9, 0.99; MNIST
bound 11.96x at weight 0.5. Writes ``benchmarks/results/budgeted_frontier.json``.
"""


def get_config() -> dict:
  return {
    "workload": "the streams of benchmarks.streams.run (2,000 per p_A) and the measured MNIST run",
    "arms": [f"share {s}, weight {w}" for s in (0.6, 0.7) for w in (0, 0.25, 0.5, 0.75, 0.9, 0.99)],
    "measures": ["mix ratio", "ratio to the decide floor", "levels lost at 0.999", "MNIST bound"],
    "call": "benchmarks.budgeted.frontier",
    "args": {"shares": [0.6, 0.7], "weights": [0.0, 0.25, 0.5, 0.75, 0.9, 0.99]},
    "json": "benchmarks/results/budgeted_frontier.json",
  }
