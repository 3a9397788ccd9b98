"""Issue 42: Carlini et al.'s CIFAR-10 pipeline (improved-diffusion UNet one step, resize to 224,
ViT-B/16) in rsjax against the same pipeline in PyTorch with the reference packages.

    python -m benchmarks.run --config benchmarks/configs/carlini.py

Figure (RESULTS.md, "Issue 42"; 2-core CPU): rsjax 0.84 samples/s against PyTorch 0.43 (1.96x).
Writes ``benchmarks/results/denoised_carlini_cpu.json``. On a GPU: ``--set args.num=10000
--set args.batch_size=1000 --set args.reps=2 --set args.device=cuda``.
"""


def get_config() -> dict:
  return {
    "workload": "one CIFAR-10-sized input, random weights, step 16, N = 32 per timed call",
    "arms": ["rsjax", "PyTorch (guided_diffusion + transformers)"],
    "measures": ["samples/s", "s per image at N = 100,000", "first call s"],
    "call": "benchmarks.denoised.carlini",
    "args": {"num": 32, "batch_size": 16, "reps": 1},
    "json": "benchmarks/results/denoised_carlini_cpu.json",
  }
