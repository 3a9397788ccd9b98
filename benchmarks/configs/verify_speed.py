"""How long ``rsjax verify`` takes on a 10,000-row certify file (no model, no device).

    python -m benchmarks.run --config benchmarks/configs/verify_speed.py

Figure (RESULTS.md, "Incremental certification", and docs/guides/verify-audit.md; 2-core CPU,
printed): ``rsjax verify`` 0.42 s of wall time on the 10,000-row run, start-up included.
"""


def get_config() -> dict:
  return {
    "workload": "a synthetic Cohen run: 10,000 rows, 10 classes, N0 100, N 100,000, alpha 0.001",
    "arms": ["rsjax verify (the process)", "rsjax.verify.verify (in process)"],
    "measures": ["wall s", "all rows match"],
    "call": "benchmarks.recertify.verify_speed",
    "args": {"rows": 10_000},
    "json": "runs/verify_speed.json",
  }
