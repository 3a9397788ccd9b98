"""Issue 52's GPU levers, what the CPU shows of them: FLOPs and bytes per stage (packing), the
counts program's shape (folding, static loops), compile seconds and the cache, the lease's dry run.

    JAX_PLATFORMS=cpu python -m benchmarks.run --config benchmarks/configs/levers_cpu.py

Figure (RESULTS.md, "Issue 52"; 586 s on a 2-core CPU): packing by 2 adds 1.34x to ResNet-110's
FLOPs per sample; folded, 2.46 ops on activations per convolution gap against 4.46; the warm
cache saves 6.0 of ResNet-20's 7.3 compile seconds. Writes ``benchmarks/results/levers_cpu.json``.
"""


def get_config() -> dict:
  return {
    "workload": "ResNet-110 and ResNet-20 (32x32), ResNet-50 (224 px), bf16, random weights",
    "arms": ["pack 1/2/4", "--fold-bn or not", "cold or warm compilation cache"],
    "measures": ["FLOPs and bytes per stage", "program shape", "compile s", "lease stages"],
    "call": "benchmarks.levers.levers",
    "args": {},
    "json": "benchmarks/results/levers_cpu.json",
  }
