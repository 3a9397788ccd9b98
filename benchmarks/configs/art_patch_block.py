"""Block ablation, rsjax against ART 1.20.1's PyTorch ``levine2020`` on the same weights (issue
72, item 5): counts of every image, certificates at patch sides 1 to 5, both speeds.

ART is not a dependency of rsjax; install it beside rsjax (for instance ``pip install --target
DIR --no-deps adversarial-robustness-toolbox==1.20.1`` and ``PYTHONPATH=DIR``: it imports
PyTorch, NumPy, SciPy, scikit-learn and tqdm), train the model, then run:

    python experiments/ablation_mnist.py --only block --sizes 4000 --epochs 30
    python -m benchmarks.run --config benchmarks/configs/art_patch_block.py

Figure (benchmarks/RESULTS.md, "Issue 72, item 5: block ablation against ART"): images whose
counts differ, certificates, certified images per second of each side. ART's ViT
(``salman2021``) needs timm and is not compared.
"""


def get_config() -> dict:
  return {
    "workload": "LeNet of 2-channel encoded digits (block ablation, side 10: 784 positions), 10 "
    "mnist5k test digits, ART's base classifier (softmax >= 0.2)",
    "arms": [
      "rsjax Patch('block', 10, threshold=0.2)",
      "ART 1.20.1 PyTorchDeRandomizedSmoothing (levine2020, block)",
    ],
    "measures": ["counts equal per image", "certified at m = 1..5", "certified images/s"],
    "call": "benchmarks.art_patch.art_patch",
    "args": {
      "model_dir": "runs/ablation_mnist/block_n4000",
      "ablation": "block",
      "size": 10,
      "images": 10,
      "every": 100,
      "threshold": 0.2,
      "rounds": 2,
    },
    "json": "benchmarks/results/art_patch_block_cpu.json",
  }
