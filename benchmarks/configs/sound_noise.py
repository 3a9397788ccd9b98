"""Issue 41: sound 8-bit noise (``gaussian_8bit``) against the float Gaussian, side by side.

    python -m benchmarks.run --config benchmarks/configs/sound_noise.py

Figures (RESULTS.md, "Issue 41"; 2-core CPU): sound / float samples per second 0.59 (MLP), 0.94
(LeNet), 0.99 (ResNet-20); certified accuracy equal but one image of 100 at r = 0.75. Two runs:
the speed (``benchmarks/results/sound_noise_speed_cpu.json``), then the accuracy on a trained
LeNet (``benchmarks/results/sound_noise_cpu.json``).
"""


def get_config() -> dict:
  return {
    "workload": "one 8-bit input per model (speed); 100 MNIST test digits, N = 10,000 (accuracy)",
    "arms": ["gaussian", "gaussian_8bit"],
    "measures": ["samples/s", "sound / float", "certified accuracy by radius", "abstain"],
    "call": "benchmarks.quality.sound_noise",
    "args": [
      {"reps": 5, "accuracy": False, "json": "benchmarks/results/sound_noise_speed_cpu.json"},
      {"n": 10_000, "skip": 10, "json": "benchmarks/results/sound_noise_cpu.json"},
    ],
    "json": "benchmarks/results/sound_noise_cpu.json",
  }
