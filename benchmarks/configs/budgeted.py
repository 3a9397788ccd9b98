"""Issue 40's MNIST run: fixed N, ``Budget`` and ``Anytime`` on the same digits, key and noise.

    python -m benchmarks.run --config benchmarks/configs/budgeted.py

Figure (RESULTS.md, "MNIST LeNet and the CIFAR-shaped row"; 15 min of certification on a 2-core
CPU after training): ``Anytime`` 11.83x fewer samples than fixed N at sigma 0.25, 6.67x at 0.5.
Writes ``benchmarks/results/budgeted.json``. The settings table: the same with
``--set args.fixed_from=benchmarks/results/budgeted_anytime.json --set
'args.anytime_fields={"FIELD": VALUE}'``.
"""


def get_config() -> dict:
  return {
    "workload": "100 MNIST test digits (every 10th) per sigma, 20 CIFAR-shaped; n0 100, N 100,000",
    "arms": ["fixed N", "Budget", "Anytime"],
    "measures": ["mean samples", "ratio", "median", "inputs run to N", "wall s", "accuracy"],
    "call": "benchmarks.budgeted.budgeted",
    "args": {"images": 100, "skip": 10, "cifar_images": 20},
    "json": "benchmarks/results/budgeted.json",
  }
