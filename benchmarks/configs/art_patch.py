"""Derandomized smoothing, rsjax against ART 1.20.1's PyTorch ``levine2020`` on the same weights
(issue 72, item 5): counts of every image, certificates at patch sides 1 to 5, both speeds.

ART is not a dependency of rsjax; install it beside rsjax in a throwaway environment (it imports
PyTorch, NumPy, SciPy, scikit-learn and tqdm), train the model, then run:

    pip install adversarial-robustness-toolbox==1.20.1
    rsjax train --model lenet --dataset mnist5k --epochs 15 --lr 0.1 --out runs/patch_col2 \\
        --method patch --ablation column --ablation-size 2
    python -m benchmarks.run --config benchmarks/configs/art_patch.py

Figure (benchmarks/RESULTS.md, "Issue 72, item 5"): images whose counts differ (and how many of
them have a vote within 1e-5 of the threshold), certified images per second of each side.
"""


def get_config() -> dict:
  return {
    "workload": "LeNet of 2-channel encoded digits (column ablation, width 2), 200 mnist5k test "
    "digits, ART's base classifier (softmax >= 0.3)",
    "arms": ["rsjax Patch(threshold=0.3)", "ART 1.20.1 PyTorchDeRandomizedSmoothing (levine2020)"],
    "measures": ["counts equal per image", "certified at m = 1..5", "certified images/s"],
    "call": "benchmarks.art_patch.art_patch",
    "args": {"model_dir": "runs/patch_col2", "ablation": "column", "size": 2, "images": 200},
    "json": "benchmarks/results/art_patch_cpu.json",
  }
