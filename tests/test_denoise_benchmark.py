"""Smoke test of benchmarks/denoised.py: ddpm and carlini (no timing is asserted)."""

import os
import sys

import pytest

# A test of the tools around the library: .ci/run runs it in the py311 stage only.
pytestmark = pytest.mark.tools

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_denoised_benchmark_reports_its_figures(tmp_path):
  sys.path.insert(0, ROOT)
  try:
    from benchmarks import denoised
  finally:
    sys.path.remove(ROOT)
  res = denoised.ddpm(unet="tiny", num=64, reps=1, batch_size=32, json=str(tmp_path / "d.json"))
  assert res["timestep"] == 145 and res["num"] == 64
  assert res["samples_per_s"] > 0 and res["s_per_image_at_N100000"] > 0
  assert res["s_per_image_kind"] == "extrapolated from N=64"
  assert (tmp_path / "d.json").exists()
  # The cifar10 setup is google/ddpm-cifar10-32's UNet: 35,746,307 parameters.
  from flax import nnx

  from rsjax import models
  from rsjax.models.denoise import unet

  abstract = nnx.eval_shape(lambda: unet.UNet2DModel(denoised.CIFAR10_UNET, rngs=nnx.Rngs(0)))
  assert models.count_params(abstract) == 35_746_307


def test_carlini_benchmark_compares_rsjax_and_torch(tmp_path):
  import pytest

  pytest.importorskip("torch")
  pytest.importorskip("guided_diffusion.unet")
  pytest.importorskip("transformers")
  sys.path.insert(0, ROOT)
  try:
    from benchmarks import denoised
  finally:
    sys.path.remove(ROOT)
  out = tmp_path / "c.json"
  res = denoised.carlini(small=True, num=8, batch_size=4, json=str(out))
  assert res["rsjax"]["timestep"] == res["torch"]["timestep"] == 1158
  assert res["rsjax"]["samples_per_s"] > 0 and res["torch"]["samples_per_s"] > 0
  assert out.exists()
