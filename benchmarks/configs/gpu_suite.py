"""Issue 43's GPU suite: CERTIFY (n0 100, N 100,000) of LeNet, ResNet-20, -110 and -50 with rsjax
against the tuned PyTorch twin, fp32, tf32 and bf16, on one accelerator.

    python -m benchmarks.run --config benchmarks/configs/gpu_suite.py

Figure (RESULTS.md, "Issue 43"; one H200, 4 images a row, the eager twin): ResNet-110 bf16 0.667
s per image, 1.58x the twin; LeNet 0.031 s, 0.75x. Writes (merges into)
``benchmarks/results/gpu.json``. On a lease, ``benchmarks/gpu_lease.sh`` runs it stage by stage
within the device call's time; the CPU runs it at ``--set args.num=100`` (the smoke test).
"""


def get_config() -> dict:
  return {
    "workload": "random inputs, n0 100, N 100,000, alpha 0.001, sigma 0.25, 4 images a row",
    "arms": ["rsjax", "the tuned PyTorch twin (eager; compiled with twin_compile auto)"],
    "measures": ["s/image (mean, p50)", "ratio to the twin", "peak memory", "MFU", "goals"],
    "call": "benchmarks.suite.suite",
    "args": {
      "models": "lenet,resnet20,resnet110,resnet50",
      "precisions": "fp32,tf32,bf16",
      "images": 4,
      "twin_compile": "none",
    },
    "json": "benchmarks/results/gpu.json",
  }
