"""Issue 40's simulated streams: budgeted CERTIFY's stopping rules against fixed N.

    python -m benchmarks.run --config benchmarks/configs/streams.py

Figure (RESULTS.md, "Simulated streams"; 15 s on a 2-core CPU): mean estimation samples per
input, 8-value mix: ``anytime`` 16,044 (6.23x fewer than fixed N), at 1.14x the decide floor;
exact worst-case error 8.6e-4 <= alpha = 1e-3. Writes ``benchmarks/results/streams.json``.
"""


def get_config() -> dict:
  return {
    "workload": "2,000 Bernoulli streams per p_A (0.5 .. 1.0), sigma 0.25, N = 100,000, grid 0..1.5",
    "arms": ["looks", "anytime", "fixed", "voracek", "betting", "floor", "floor(decide)"],
    "measures": ["mean samples", "levels lost vs fixed N", "exact worst-case error"],
    "call": "benchmarks.streams.simulate",
    "args": {"streams": 2000},
    "json": "benchmarks/results/streams.json",
  }
