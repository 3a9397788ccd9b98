"""Incremental certification (``rsjax recertify``) against certifying each child from scratch.

    python -m benchmarks.run --config benchmarks/configs/recertify.py

Figure (RESULTS.md, "Incremental certification"; 2-core CPU): 1,000 disagreement samples an input
against 10,000, seconds and certified accuracy of each child (bf16, int8, pruned, fine-tuned).
Writes ``benchmarks/results/recertify.json`` (``benchmarks/recertify.py`` unchanged).
"""


def get_config() -> dict:
  return {
    "workload": "a LeNet parent trained 2 epochs, 30 test images, N = 10,000",
    "arms": ["recertify (1,000 disagreement samples)", "from scratch"],
    "measures": ["zeta upper mean", "seconds", "certified accuracy by radius"],
    "script": "benchmarks.recertify",
    "args": {"epochs": 2, "images": 30, "n": 10_000, "n_disagree": 1000},
    "json": "benchmarks/results/recertify.json",
    "json_flag": "out",
  }
