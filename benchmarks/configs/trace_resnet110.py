"""Issue 43's profile: where one ResNet-110 bf16 certification's device time goes, from a
``jax.profiler`` trace (kernels by class, the longest kernels, idle time).

    python -m benchmarks.run --config benchmarks/configs/trace_resnet110.py

Figure (RESULTS.md, issue 43, "Profile"; one H200): device busy 609.5 ms of 741 ms, convolutions
471 ms (77%), 357 ms of them in cuDNN's Ampere kernel for the first stage. Writes
``gpu_out/trace/trace_summary.json`` (and the trace), committed as
``benchmarks/results/gpu_trace_resnet110_bf16.json``; on a GPU (a CPU trace has no kernels).
"""


def get_config() -> dict:
  return {
    "workload": "ResNet-110, bf16, one image after a warm-up, n0 100, N 100,000",
    "arms": ["rsjax"],
    "measures": ["kernels and ms by class", "busy and idle ms", "top kernels"],
    "call": "benchmarks.profile.trace",
    "args": {"model": "resnet110", "precision": "bf16", "num": 100_000, "out": "gpu_out/trace"},
    "json": "benchmarks/results/gpu_trace_resnet110_bf16.json",
    "json_arg": None,
  }
