"""Tests of rsjax.ddrs.training: DDRS Algorithm 2 (per-example sigma memory)."""

import os

import numpy as np
import pytest

from rsjax import models
from rsjax.ddrs.training import SIGMA_FILE, DDRSConfig, train_ddrs
from rsjax.training import MACER, TrainConfig


def _model():
  return models.create_model("mlp", num_classes=10, input_shape=(8, 8, 1), rngs=0)


def test_sigma_memory_carried_across_epochs_and_resumed(digits256, tmp_path):
  tc = TrainConfig(sigma=0.25, epochs=3, batch_size=64, lr=0.05)
  cfg = DDRSConfig(sigma0=0.25, sigma_steps=2, sigma_lr=0.02, sigma_draws=4, warmup_epochs=1)
  _, hist, mem = train_ddrs(
    0, _model(), digits256, ddrs_config=cfg, train_config=tc, workdir=tmp_path / "a", progress=False
  )
  assert mem.shape == (256,) and np.all(mem >= cfg.sigma_min)
  assert hist[0]["sigma_std"] == 0.0 and hist[0]["sigma_mean"] == pytest.approx(0.25)  # warm-up
  assert hist[1]["sigma_std"] > 0 and hist[2]["sigma_std"] > 0
  # each epoch starts from the previous memory: 2 epochs x 2 steps of <= 0.02 * |dR/dsigma|
  np.testing.assert_array_equal(np.load(tmp_path / "a" / SIGMA_FILE), mem)
  # interrupted after 2 epochs then resumed: same memory and weights as uninterrupted
  _, _, _ = train_ddrs(
    0,
    _model(),
    digits256,
    ddrs_config=cfg,
    train_config=TrainConfig(sigma=0.25, epochs=2, batch_size=64, lr=0.05),
    workdir=tmp_path / "b",
    progress=False,
  )
  _, hist_b, mem_b = train_ddrs(
    0, _model(), digits256, ddrs_config=cfg, train_config=tc, workdir=tmp_path / "b", progress=False
  )
  np.testing.assert_array_equal(mem_b, mem)
  assert hist_b[-1]["train_loss"] == pytest.approx(hist[-1]["train_loss"], rel=1e-6)
  assert os.path.exists(tmp_path / "b" / "config.json")


def test_zero_steps_is_fixed_sigma_training(digits256):
  cfg = DDRSConfig(sigma0=0.3, sigma_steps=0)
  _, hist, mem = train_ddrs(
    1,
    _model(),
    digits256,
    ddrs_config=cfg,
    train_config=TrainConfig(sigma=0.3, epochs=1, batch_size=64),
    progress=False,
  )
  np.testing.assert_array_equal(mem, np.float32(0.3))


def test_macer_with_per_example_sigma_trains():
  # DDRS's CIFAR recipe: MACER with the memory's per-example sigma in its hinge. lbd = 1
  # lets the cross-entropy part lead from scratch (at lbd = 12 the hinge term grows as inputs
  # become correct, so the total loss need not fall on a fresh model).
  from sklearn.datasets import load_digits

  d = load_digits()
  x, y = (d.images / 16.0).astype(np.float32)[..., None], d.target.astype(np.int32)
  tc = TrainConfig(
    sigma=0.25, epochs=3, batch_size=64, lr=0.1, objective=MACER(num_noise=4, lbd=1.0)
  )
  cfg = DDRSConfig(sigma0=0.25, sigma_steps=1, sigma_lr=0.02, sigma_draws=2)
  _, hist, mem = train_ddrs(0, _model(), (x, y), ddrs_config=cfg, train_config=tc, progress=False)
  losses = [h["train_loss"] for h in hist]
  assert losses[-1] < 0.5 * losses[0], losses
  assert hist[-1]["train_acc"] > 0.6  # noisy training accuracy, chance is 0.1
  assert np.ptp(mem) > 0 and hist[-1]["sigma_std"] > 0  # the memory moved per example


def test_memory_is_the_trainer_batch_sigma(digits256):
  # the DDRS memory cannot be combined with the strategies' resampling
  from rsjax.training import Discard

  with pytest.raises(ValueError, match="batch_sigma"):
    TrainConfig(sigma=0.25, batch_sigma=DDRSConfig(sigma0=0.25), discard=Discard(epoch=1))


def test_bad_config():
  with pytest.raises(ValueError, match="parametrization"):
    DDRSConfig(sigma0=0.25, parametrization="exp")
  with pytest.raises(ValueError, match="sigma_draws"):
    DDRSConfig(sigma0=0.25, sigma_draws=0)
