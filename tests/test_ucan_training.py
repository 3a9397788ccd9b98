"""Tests of rsjax.ucan.training: UCAN generators trained, frozen and certified."""

import numpy as np
import pytest

from rsjax import models, ucan
from rsjax.ucan import training as ucan_training


def _model():
  return models.create_model("mlp", num_classes=10, input_shape=(8, 8, 1), rngs=0)


def _config(generator, sigma=0.25, **kw):
  return ucan_training.UCANConfig(
    generator, sigma, **{"batch_size": 64, "lr": 0.05, "draws": 2, "epochs": 1, **kw}
  )


def test_universal_noise_is_trained_frozen_and_certified_as_saved(digits256, tmp_path):
  model, noise, hist = ucan_training.train_ucan(
    0, _model(), digits256, _config("universal"), workdir=tmp_path
  )
  assert isinstance(noise, ucan.FrozenNoise) and noise.evaluate(digits256[0][:2]).rate == 0
  mu, sig = noise.mu, noise.sigma
  assert mu.shape == sig.shape == (8, 8, 1) and len(hist) == 1
  assert not np.allclose(sig, 0.25) and not np.allclose(mu, 0.0)  # the generator trained
  saved = ucan.load_noise(tmp_path)
  np.testing.assert_array_equal(saved.mu, mu)
  np.testing.assert_array_equal(saved.sigma, sig)
  # one file, read both as the trained noise and as the CLI's dataset-wise noise
  assert sorted(p.name for p in tmp_path.glob("*.npz")) == [ucan.NOISE_FILE]
  np.testing.assert_array_equal(ucan.load_universal_noise(tmp_path).sigma, sig)
  # a finished workdir is loaded, not retrained: same frozen noise, same weights
  again, noise3, _ = ucan_training.train_ucan(
    1, _model(), digits256, ucan_training.UCANConfig("universal", 0.25), workdir=tmp_path
  )
  np.testing.assert_array_equal(noise3.sigma, sig)
  apply_fn, params = models.to_apply_fn(model)
  apply2, params2 = models.to_apply_fn(again)
  x = digits256[0][:4]
  kw = dict(num_classes=10, n0=32, n=300, alpha=0.01, batch_size=300)
  a = ucan.certify(3, apply_fn, params, x, sigma=sig, mu=mu, **kw)
  b = ucan.certify(3, apply2, params2, x, sigma=saved, **kw)
  np.testing.assert_array_equal(a.radius, b.radius)
  np.testing.assert_array_equal(a.counts, b.counts)
  assert a.sound and b.sound
  np.testing.assert_allclose(a.radius, sig.min() * a.normalized_radius)
  with pytest.raises(ValueError, match="holds a 'universal'"):
    ucan_training.train_ucan(
      0, _model(), digits256, ucan_training.UCANConfig("pattern-l2", 0.25), workdir=tmp_path
    )


def test_pattern_noise_is_the_fixed_map(digits256):
  _, noise, _ = ucan_training.train_ucan(
    0, _model(), digits256, _config("pattern-linf", 0.5, batch_size=128, lr=1e-3, draws=1)
  )
  np.testing.assert_array_equal(noise.mu, 0.0)
  np.testing.assert_allclose(noise.sigma, 0.5 * ucan.pattern_sigma((8, 8, 1), pattern="linf"))


def test_ucan_config_checks_its_fields():
  assert ucan_training.UCANConfig("universal", 0.25).draws == 5  # UCAN's defaults
  with pytest.raises(ValueError, match="generator"):
    ucan_training.UCANConfig("pattern-l3", 0.25)
  with pytest.raises(ValueError, match="sigma"):
    ucan_training.UCANConfig("universal", 0.0)
  with pytest.raises(ValueError, match="draws"):
    ucan_training.UCANConfig("universal", 0.25, draws=0)


@pytest.mark.heavy
def test_input_dependent_generator_needs_the_opt_in_and_is_marked_unsound(digits256, tmp_path):
  with pytest.raises(ValueError, match="not sound"):
    ucan_training.train_ucan(0, _model(), digits256, _config("input"))
  model, noise, hist = ucan_training.train_ucan(
    0,
    _model(),
    digits256,
    _config("input"),
    workdir=tmp_path,
    allow_unsound=True,
    model_config={"model": "mlp", "num_classes": 10, "input_shape": [8, 8, 1]},
  )
  assert isinstance(noise, ucan.InputDependentNoise)
  assert len(hist) == 1 and np.isfinite(hist[0]["train_loss"])
  assert not (tmp_path / ucan.NOISE_FILE).exists()  # nothing frozen: the noise depends on x
  with pytest.raises(ValueError, match="not sound"):
    ucan_training.load_ucan_model(tmp_path)
  wrapped, cfg = ucan_training.load_ucan_model(tmp_path, allow_unsound=True)
  assert cfg["sound"] is False
  x = digits256[0][:3]
  mu_x, sig_x = wrapped.noise(x, 0.25)
  assert mu_x.shape == sig_x.shape == x.shape
  assert float(np.max(np.ptp(np.asarray(mu_x), axis=0))) > 0  # the noise differs per input
  # its sigma source: (mu(x), lambda sigma(x)) per input, rate inf
  values = wrapped.noise_source(0.25).evaluate(x)
  assert values.rate == np.inf
  np.testing.assert_array_equal(values.mu, np.asarray(mu_x))
  np.testing.assert_array_equal(values.sigma, np.asarray(sig_x) * np.float32(0.25))
  # the finished workdir gives the same source back
  _, again, _ = ucan_training.train_ucan(
    0, _model(), digits256, _config("input"), workdir=tmp_path, allow_unsound=True
  )
  np.testing.assert_array_equal(again.evaluate(x).sigma, values.sigma)
  kw = dict(sigma=0.25, num_classes=10, n0=32, n=300, alpha=0.01, batch_size=300)
  with pytest.raises(ValueError, match="not sound"):
    ucan.certify_input_dependent(3, wrapped, x, **kw)
  cert = ucan.certify_input_dependent(3, wrapped, x, allow_unsound=True, **kw)
  assert not cert.sound and "NOT A CERTIFICATE" in cert.guarantee
  apply_fn, params = models.to_apply_fn(wrapped.classifier)
  raw = ucan.certify(
    3,
    apply_fn,
    params,
    x,
    sigma=values.sigma,
    mu=values.mu,
    num_classes=10,
    n0=32,
    n=300,
    alpha=0.01,
    batch_size=300,
  )
  np.testing.assert_array_equal(cert.counts, raw.counts)  # same noise, only the label differs
  assert raw.sound
  # the classifier alone reloads from the workdir as any trained model
  clf, _ = models.load_model(tmp_path)
  np.testing.assert_array_equal(
    models.to_apply_fn(clf)[0](models.to_apply_fn(clf)[1], x),
    models.to_apply_fn(model)[0](models.to_apply_fn(model)[1], x),
  )


def test_ucan_training_resumes(digits256, tmp_path):
  _, noise, _ = ucan_training.train_ucan(
    0, _model(), digits256, _config("universal", epochs=2), workdir=tmp_path / "a", progress=False
  )
  # cut after epoch 1 (the run directory without its final save), then resumed
  ucan_training.train_ucan(
    0, _model(), digits256, _config("universal"), workdir=tmp_path / "b", progress=False
  )
  import shutil

  for name in ("config.json", "checkpoints", ucan.NOISE_FILE):
    p = tmp_path / "b" / name
    shutil.rmtree(p) if p.is_dir() else p.unlink()
  _, noise_b, hist_b = ucan_training.train_ucan(
    0, _model(), digits256, _config("universal", epochs=2), workdir=tmp_path / "b", progress=False
  )
  assert [h["epoch"] for h in hist_b] == [1, 2]
  np.testing.assert_array_equal(noise_b.sigma, noise.sigma)
  np.testing.assert_array_equal(noise_b.mu, noise.mu)


def test_only_universal_noise_is_the_dataset_wise_noise(tmp_path):
  noise = ucan.FrozenNoise(np.full((4, 4, 1), 0.3, np.float32), mu=np.zeros((4, 4, 1), np.float32))
  assert ucan.load_universal_noise(tmp_path) is None
  ucan.save_noise(tmp_path, noise, "pattern-l2")
  assert ucan.read_noise(tmp_path)[1] == "pattern-l2"
  assert ucan.load_universal_noise(tmp_path) is None  # a pattern's noise is not dataset-wise
  np.testing.assert_array_equal(ucan.load_noise(tmp_path).sigma, noise.sigma)
  ucan.save_universal_noise(tmp_path, mu=noise.mu, sigma=noise.sigma)
  np.testing.assert_array_equal(ucan.load_universal_noise(tmp_path).sigma, noise.sigma)
  with pytest.raises(ValueError, match="frozen"):
    ucan.save_noise(tmp_path, noise, "input")
  with pytest.raises(ValueError, match="> 0"):
    ucan.save_universal_noise(tmp_path, mu=noise.mu, sigma=-noise.sigma)
