"""Tests of rsjax.training.ucan: UCAN generators trained, frozen and certified."""

import numpy as np
import pytest

from rsjax import anisotropic, models
from rsjax.training import ucan


def _model():
  return models.create_model("mlp", num_classes=10, input_shape=(8, 8, 1), rngs=0)


def test_universal_noise_is_trained_frozen_and_certified_as_saved(digits256, tmp_path):
  model, mu, sig, hist = ucan.train_ucan(0, _model(), digits256, generator="universal", sigma=0.25,
                                         epochs=1, batch_size=64, lr=0.05, draws=2,
                                         workdir=tmp_path)
  assert mu.shape == sig.shape == (8, 8, 1) and len(hist) == 1
  assert not np.allclose(sig, 0.25) and not np.allclose(mu, 0.0)  # the generator trained
  mu2, sig2, gen = ucan.load_noise(tmp_path)
  assert gen == "universal"
  np.testing.assert_array_equal(mu2, mu)
  np.testing.assert_array_equal(sig2, sig)
  # a finished workdir is loaded, not retrained: same frozen noise, same weights
  again, mu3, sig3, _ = ucan.train_ucan(1, _model(), digits256, generator="universal", sigma=0.25,
                                        epochs=1, workdir=tmp_path)
  np.testing.assert_array_equal(sig3, sig)
  apply_fn, params = models.to_apply_fn(model)
  apply2, params2 = models.to_apply_fn(again)
  x = digits256[0][:4]
  kw = dict(num_classes=10, n0=32, n=300, alpha=0.01, batch_size=300)
  a = anisotropic.certify(3, apply_fn, params, x, sigma=sig, mu=mu, **kw)
  b = anisotropic.certify(3, apply2, params2, x, sigma=sig2, mu=mu2, **kw)
  np.testing.assert_array_equal(a.radius, b.radius)
  assert a.sound
  np.testing.assert_allclose(a.radius, sig.min() * a.normalized_radius)
  with pytest.raises(ValueError, match="holds a 'universal'"):
    ucan.train_ucan(0, _model(), digits256, generator="pattern-l2", sigma=0.25, workdir=tmp_path)


def test_pattern_noise_is_the_fixed_map(digits256):
  _, mu, sig, _ = ucan.train_ucan(0, _model(), digits256, generator="pattern-linf", sigma=0.5,
                                  epochs=1, batch_size=128, draws=1)
  np.testing.assert_array_equal(mu, 0.0)
  np.testing.assert_allclose(sig, 0.5 * anisotropic.pattern_sigma((8, 8, 1), pattern="linf"))


def test_input_dependent_generator_needs_the_opt_in_and_is_marked_unsound(digits256, tmp_path):
  with pytest.raises(ValueError, match="not sound"):
    ucan.train_ucan(0, _model(), digits256, generator="input", sigma=0.25)
  model, mu, sig, hist = ucan.train_ucan(0, _model(), digits256, generator="input", sigma=0.25,
                                         epochs=1, batch_size=64, lr=0.05, draws=2,
                                         workdir=tmp_path, allow_unsound=True,
                                         model_config={"model": "mlp", "num_classes": 10,
                                                       "input_shape": [8, 8, 1]})
  assert mu is None and sig is None and len(hist) == 1 and np.isfinite(hist[0]["train_loss"])
  assert not (tmp_path / ucan.NOISE_FILE).exists()  # nothing frozen: the noise depends on x
  with pytest.raises(ValueError, match="not sound"):
    ucan.load_ucan_model(tmp_path)
  wrapped, cfg = ucan.load_ucan_model(tmp_path, allow_unsound=True)
  assert cfg["sound"] is False
  x = digits256[0][:3]
  mu_x, sig_x = wrapped.noise(x, 0.25)
  assert mu_x.shape == sig_x.shape == x.shape
  assert float(np.max(np.ptp(np.asarray(mu_x), axis=0))) > 0  # the noise differs per input
  kw = dict(sigma=0.25, num_classes=10, n0=32, n=300, alpha=0.01, batch_size=300)
  with pytest.raises(ValueError, match="not sound"):
    ucan.certify_input_dependent(3, wrapped, x, **kw)
  cert = ucan.certify_input_dependent(3, wrapped, x, allow_unsound=True, **kw)
  assert not cert.sound and "NOT A CERTIFICATE" in cert.guarantee
  # the classifier alone reloads from the workdir as any trained model
  from rsjax import training
  clf, _ = training.load_model(tmp_path)
  np.testing.assert_array_equal(models.to_apply_fn(clf)[0](models.to_apply_fn(clf)[1], x),
                                models.to_apply_fn(model)[0](models.to_apply_fn(model)[1], x))


def test_ucan_training_resumes(digits256, tmp_path):
  kw = dict(generator="universal", sigma=0.25, batch_size=64, lr=0.05, draws=2, progress=False)
  _, mu, sig, _ = ucan.train_ucan(0, _model(), digits256, epochs=2, workdir=tmp_path / "a", **kw)
  # cut after epoch 1 (the run directory without its final save), then resumed
  ucan.train_ucan(0, _model(), digits256, epochs=1, workdir=tmp_path / "b", **kw)
  import shutil
  for name in ("config.json", "checkpoints", ucan.NOISE_FILE):
    p = tmp_path / "b" / name
    shutil.rmtree(p) if p.is_dir() else p.unlink()
  _, mu_b, sig_b, hist_b = ucan.train_ucan(0, _model(), digits256, epochs=2, workdir=tmp_path / "b",
                                           **kw)
  assert [h["epoch"] for h in hist_b] == [1, 2]
  np.testing.assert_array_equal(sig_b, sig)
  np.testing.assert_array_equal(mu_b, mu)
