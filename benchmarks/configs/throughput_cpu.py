"""rsjax's counts engine against Cohen et al.'s PyTorch loop (``benchmarks.twins.sample_noise_reference``)
on the same weights, on a CPU: the older CPU sections of RESULTS.md.

    python -m benchmarks.run --config benchmarks/configs/throughput_cpu.py

Figures (RESULTS.md, issues 16 and 24, "2026-11-21", "Earlier runs", "Goals"; 2-core CPU,
printed, no JSON kept): samples/s of rsjax and the reference per model, their ratio, s per image
at N = 100,000. The sections' other commands: ``--set args.models=mlp,lenet --set
args.num=100000 --set args.quick=false`` (measured at N itself), ``--set
args.noise=gaussian_fast`` (the cheaper stream), ``--set args.bf16=false``.
"""


def get_config() -> dict:
  return {
    "workload": "every model of rsjax.models at a small N (--quick), random weights, one input",
    "arms": ["rsjax", "Cohen et al.'s loop in PyTorch (threads = cores, and 1)", "rsjax bf16"],
    "measures": ["samples/s", "ratio", "s per image at N", "compile s", "memory", "FLOPs"],
    "call": "benchmarks.throughput.throughput",
    "args": {"quick": True, "bf16": True},
    "json": "runs/throughput_cpu.json",
  }
