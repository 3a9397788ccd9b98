"""Issue 70, item 3: an ImageNet image folder's decoding rate against the engine's rate.

    rsjax bench --arch resnet50 --N 100000 --N0 100 --measure-n 256 --batch 32 \
      --json benchmarks/results/decode_cpu_resnet50.json
    python -m benchmarks.run --config benchmarks/configs/decode.py

Figure: benchmarks/RESULTS.md, "Issue 70". Decodes a folder of 400 real ImageNet JPEGs
(``benchmarks.decode``) with 1 and 2 threads as a run reads it, and divides by ResNet-50's
seconds per image at the default N (the ``rsjax bench`` JSON above).
"""


def get_config() -> dict:
  return {
    "workload": "400 ImageNet JPEGs (tests/data/foolbox, copied), Resize(256) + CenterCrop(224)",
    "arms": ["1 decoding thread", "2 decoding threads", "the engine: ResNet-50 at N = 100,000"],
    "measures": ["decoded images per second", "certified images per second", "their ratio"],
    "call": "benchmarks.decode.decode_rate",
    "args": {"engine_json": "benchmarks/results/decode_cpu_resnet50.json"},
    "json": "benchmarks/results/decode_cpu.json",
  }
