"""Issue 52, lever 1 on the device: the 16-channel 3x3 convolution of the CIFAR ResNets' first
stage alone, against its rewrites (packed by 2 and 4, zero-padded, grouped, fused epilogues).

    python -m benchmarks.run --config benchmarks/configs/conv_micro.py

Figure: none yet in RESULTS.md (the lease's stage s1, ``benchmarks/gpu_lease.sh``, decides on a
GPU whether packing or padding beats the 16-channel kernel). Writes ``gpu_out/conv.json``;
``--set args.cases=base16,pack2 --set args.tag=unfused`` with the fused-conv rewriter off is
stage ``conv_unfused``.
"""


def get_config() -> dict:
  return {
    "workload": "one batch of 16-channel 32x32 activations, 10 chained convolutions per program",
    "arms": ["base16", "pack2", "pack4", "pad32", "grouped", "the 32-channel stage-2 conv"],
    "measures": ["ms per convolution", "executed FLOPs", "TFLOP/s"],
    "call": "benchmarks.conv_micro.conv_micro",
    "args": {"check": True},
    "json": "gpu_out/conv.json",
  }
