"""Issue 52, lever 3 on the device: one certification's fixed cost per call (the intercept)
against its cost per sample (the slope), ``rsjax.certify`` of LeNet at several N.

    python -m benchmarks.run --config benchmarks/configs/n_scaling.py

Figure: none yet in RESULTS.md (the lease's stage s2, ``benchmarks/gpu_lease.sh``: LeNet's 31 ms
per image on the H200 of issue 43, fixed or per sample). Writes ``gpu_out/lenet_scaling.json``.
"""


def get_config() -> dict:
  return {
    "workload": "LeNet, bf16, one image, n0 100, an explicit batch, N = 1,000 / 10,000 / 100,000",
    "arms": ["each N"],
    "measures": ["seconds per call", "least-squares intercept (ms) and slope (ns per sample)"],
    "call": "benchmarks.suite.n_scaling",
    "args": {"model": "lenet", "precision": "bf16", "nums": "1000,10000,100000"},
    "json": "gpu_out/lenet_scaling.json",
  }
