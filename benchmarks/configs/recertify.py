"""Incremental certification (``rsjax recertify``) against certifying each child from scratch.

    python -m benchmarks.run --config benchmarks/configs/recertify.py

Figure (RESULTS.md, "Incremental certification"; 2-core CPU): the demo's LeNet at sigma 0.25 and
0.5, N0 100 + N 100,000 from scratch against 20,000 disagreement samples (5.00x fewer), for bf16
and int8 children on 50 test digits (five blocks of 10) and pruned 50% / 90% and fine-tuned
children on 10; each block's runs resume, the last run writes ``benchmarks/results/recertify.json``
from the finished runs (each checked by ``rsjax verify``). The runs go under ``build/recertify``.
"""

_ROOT = "build/recertify"


def get_config() -> dict:
  blocks = {"root": _ROOT}
  return {
    "workload": "the demo's LeNet parents (sigma 0.25, 0.5), N = 100,000, 50 + 10 test digits",
    "arms": ["recertify (20,000 disagreement samples)", "from scratch (100,100 samples)"],
    "measures": ["zeta upper mean", "samples and seconds an image", "certified accuracy by radius"],
    "call": "benchmarks.recertify.recertify",
    "args": [
      {**blocks, "blocks": [0, 1, 2, 3, 4], "children": ["int8", "bf16"]},
      {**blocks, "blocks": [0], "children": ["prune", "tuned", "prune90"]},
      {**blocks, "report": True},
    ],
    "json": "benchmarks/results/recertify.json",
  }
