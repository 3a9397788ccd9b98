"""Tests of rsjax.training.ddrs: DDRS Algorithm 2 (per-example sigma memory)."""

import os

import numpy as np
import pytest

from rsjax import models
from rsjax.training import TrainConfig
from rsjax.training.ddrs import SIGMA_FILE, DDRSConfig, train_ddrs


@pytest.fixture(scope="module")
def digits():
  from sklearn.datasets import load_digits
  d = load_digits()
  x = (d.images / 16.0).astype(np.float32)[..., None][:256]
  return x, d.target[:256].astype(np.int32)


def _model():
  return models.create_model("mlp", num_classes=10, input_shape=(8, 8, 1), rngs=0)


def test_sigma_memory_carried_across_epochs_and_resumed(digits, tmp_path):
  tc = TrainConfig(sigma=0.25, epochs=3, batch_size=64, lr=0.05)
  cfg = DDRSConfig(sigma0=0.25, sigma_steps=2, sigma_lr=0.02, sigma_draws=4, warmup_epochs=1)
  _, hist, mem = train_ddrs(0, _model(), digits, ddrs_config=cfg, train_config=tc,
                            workdir=tmp_path / "a", progress=False)
  assert mem.shape == (256,) and np.all(mem >= cfg.sigma_min)
  assert hist[0]["sigma_std"] == 0.0 and hist[0]["sigma_mean"] == pytest.approx(0.25)  # warm-up
  assert hist[1]["sigma_std"] > 0 and hist[2]["sigma_std"] > 0
  # each epoch starts from the previous memory: 2 epochs x 2 steps of <= 0.02 * |dR/dsigma|
  np.testing.assert_array_equal(np.load(tmp_path / "a" / SIGMA_FILE), mem)
  # interrupted after 2 epochs then resumed: same memory and weights as uninterrupted
  _, _, _ = train_ddrs(0, _model(), digits, ddrs_config=cfg,
                       train_config=TrainConfig(sigma=0.25, epochs=2, batch_size=64, lr=0.05),
                       workdir=tmp_path / "b", progress=False)
  _, hist_b, mem_b = train_ddrs(0, _model(), digits, ddrs_config=cfg, train_config=tc,
                                workdir=tmp_path / "b", progress=False)
  np.testing.assert_array_equal(mem_b, mem)
  assert hist_b[-1]["train_loss"] == pytest.approx(hist[-1]["train_loss"], rel=1e-6)
  assert os.path.exists(tmp_path / "b" / "config.json")


def test_zero_steps_is_fixed_sigma_training(digits):
  cfg = DDRSConfig(sigma0=0.3, sigma_steps=0)
  _, hist, mem = train_ddrs(1, _model(), digits, ddrs_config=cfg,
                            train_config=TrainConfig(sigma=0.3, epochs=1, batch_size=64),
                            progress=False)
  np.testing.assert_array_equal(mem, np.float32(0.3))


def test_bad_config():
  with pytest.raises(ValueError, match="parametrization"):
    DDRSConfig(sigma0=0.25, parametrization="exp")
  with pytest.raises(ValueError, match="sigma_draws"):
    DDRSConfig(sigma0=0.25, sigma_draws=0)
