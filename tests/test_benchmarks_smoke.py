"""Smoke test of the benchmark harness (no timing is asserted).

Runs ``python -m benchmarks.throughput`` on a tiny workload in a subprocess and
checks that it reports every figure; with PyTorch installed (a benchmark-only
extra) it also checks the reference side: the PyTorch twins compute the same
logits as the rsjax models, and the reference loop counts every sample.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _has_torch() -> bool:
  try:
    import torch  # noqa: F401
  except ImportError:
    return False
  return True


def _reference_torch():
  sys.path.insert(0, ROOT)
  try:
    from benchmarks import reference_torch
  finally:
    sys.path.remove(ROOT)
  return reference_torch


def test_throughput_command_reports_all_figures(tmp_path):
  out = tmp_path / "bench.json"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("XLA_FLAGS", None)
  proc = subprocess.run(
      [sys.executable, "-m", "benchmarks.throughput", "--models", "mlp", "--num", "500",
       "--reps", "1", "--batch-size", "128", "--bf16", "--json", str(out)],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "| mlp | 500 | 128 |" in proc.stdout
  report = json.loads(out.read_text())
  assert report["environment"]["jax"]
  (r,) = report["results"]
  for k in ("rsjax_samples_per_s", "rsjax_s_per_image", "compile_s", "step_memory_mb",
            "flops_per_sample", "bf16_samples_per_s"):
    assert r[k] > 0, k
  assert r["s_per_image_kind"] == "extrapolated from N=500"
  # The MLP's XLA FLOPs are close to the analytic 2 * (784*256 + 256*256 + 256*10).
  analytic = 2 * (784 * 256 + 256 * 256 + 256 * 10)
  assert 0.8 * analytic < r["flops_per_sample"] < 1.5 * analytic
  if _has_torch():
    assert r["reference_samples_per_s"] > 0
    assert r["ratio"] > 0
    assert r["logits_check"]["argmax_agree"] == 1.0


@pytest.mark.parametrize("name,shape", [
    ("mlp", (6, 6, 2)),
    ("lenet", (28, 28, 1)),
    ("cnn", (10, 10, 1)),
    ("resnet20", (8, 8, 3)),
])
def test_torch_twin_has_the_same_logits(name, shape):
  torch = pytest.importorskip("torch")
  rt = _reference_torch()
  from rsjax import models
  model = models.create_model(name, num_classes=7, input_shape=shape, rngs=3)
  apply_fn, variables = models.to_apply_fn(model)
  twin = rt.from_flax(model, shape)
  x = np.random.default_rng(0).random((5,) + shape, dtype=np.float32)
  check = rt.check_same_logits(twin, apply_fn, variables, x)
  assert check["max_abs_diff"] <= 1e-4 * max(check["logit_scale"], 1.0)
  # A wrong weight layout is caught (the check can fail).
  with torch.no_grad():
    p = next(twin.parameters())
    p.mul_(-1.5)
  with pytest.raises(AssertionError, match="differs"):
    rt.check_same_logits(twin, apply_fn, variables, x)


def test_reference_loop_counts_every_sample():
  torch = pytest.importorskip("torch")
  rt = _reference_torch()
  lin = torch.nn.Linear(4, 3)
  with torch.no_grad():
    lin.weight.zero_()
    lin.bias.copy_(torch.tensor([0.0, 1.0, 0.0]))
  counts = rt.sample_noise_reference(lin, torch.zeros(4), 1001, 400, sigma=0.5, num_classes=3)
  assert counts.tolist() == [0, 1001, 0]
  torch.manual_seed(0)
  lin2 = torch.nn.Linear(4, 3)
  counts = rt.sample_noise_reference(lin2, torch.zeros(4), 999, 400, sigma=1.0, num_classes=3)
  assert counts.sum() == 999 and (counts > 0).sum() >= 2
