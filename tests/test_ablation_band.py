"""The band path of derandomized smoothing with a LeNet (``rsjax.ablation._band``): its first
convolution, computed only near each column or row band, is the generic one's (to float
rounding in the band's reach, exactly the bias outside it), the logits agree, and
``certify_patch`` gives the generic path's counts on mnist5k digits; a LeNet that normalizes
its input and any other classifier take the generic path."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rsjax import data, models
from rsjax.ablation import _ablate, _band, _certify

#: conv1's outputs are sums of 50 products of size about 1: the band path's differ from the
#: generic path's by an ulp or two where XLA fuses another multiply-add into an FMA.
CONV1_TOL = 1e-6


def _lenet(normalize=None, seed=0):
  model = models.LeNet(
    input_shape=(28, 28, 2), num_classes=10, normalize=normalize, rngs=nnx.Rngs(seed)
  )
  return model, *models.to_apply_fn(model)


@pytest.fixture(scope="module")
def lenet():
  """A LeNet-5 of random weights (no normalization) and its jitted parts, compiled once."""
  model, _, _ = _lenet()
  parts = {"first_conv": model.first_conv, "after": model.after_first_conv, "forward": model}
  return model, {name: jax.jit(f) for name, f in parts.items()}


@pytest.fixture(scope="module")
def digits():
  """Six mnist5k test digits ``[6, 28, 28, 1]``."""
  x, _ = data.load("mnist5k", "test").get_batch(np.arange(0, 60, 10))
  return np.asarray(x, np.float32)


def _reach(masks):
  """``[P, H, W]`` bool: conv1 outputs (5x5, padding 2) whose receptive field holds a kept
  pixel of each mask ``[P, H, W]``."""
  padded = np.pad(masks, ((0, 0), (2, 2), (2, 2)))
  h, w = masks.shape[1:]
  windows = [padded[:, i : i + h, j : j + w] for i in range(5) for j in range(5)]
  return np.any(windows, axis=0)


@pytest.mark.parametrize("ablation", ["column", "row"])
@pytest.mark.parametrize("size", [1, 2, 4, 12])
def test_first_conv_and_logits_are_the_generic_ones(lenet, digits, ablation, size):
  model, jitted = lenet
  masks = _ablate.position_masks((28, 28, 1), ablation, size)
  if size > 1:  # the last bands wrap around the image's edge
    assert masks[-1].any(axis=1 if ablation == "row" else 0)[[0, -1]].all()
  plan = _band.band_plan(masks, (5, 5), 2)
  assert plan is not None and plan.length < 28
  x = jnp.asarray(digits[:3])
  z = _ablate.encode(x[:, None], jnp.asarray(masks)[None]).reshape(-1, 28, 28, 2)
  want = np.asarray(jitted["first_conv"](z))
  got = np.asarray(jax.jit(lambda v: _band.band_first_conv(model, v, plan))(x))
  np.testing.assert_allclose(got, want, rtol=0, atol=CONV1_TOL)
  outside = ~np.tile(_reach(masks), (3, 1, 1))  # [3 * P, H, W]
  bias = np.asarray(model.conv1.bias[...])
  assert np.array_equal(got[outside], np.broadcast_to(bias, got[outside].shape))
  assert np.array_equal(want[outside], got[outside])  # +-0 sums plus the bias: the bias
  logits = jitted["after"](jnp.asarray(got))
  np.testing.assert_allclose(logits, jitted["forward"](z), rtol=0, atol=1e-5)


@pytest.mark.parametrize(
  "ablation, size, threshold, batch",
  [("column", 2, None, 1000), ("column", 5, 0.1005, 50), ("row", 3, None, 100)],
)
def test_certify_patch_counts_are_the_generic_ones(
  digits, monkeypatch, ablation, size, threshold, batch
):
  """Random weights vote for several classes (their softmax lies in [0.098, 0.102]: 0.1005
  keeps some classes of each position, about 1 in 3)."""
  _, apply_fn, params = _lenet(seed=1)
  used = []
  band_counts = _band.band_counts
  monkeypatch.setattr(_band, "band_counts", lambda *a: used.append(band_counts(*a)) or used[-1])
  opts = dict(ablation=ablation, size=size, batch=batch, threshold=threshold)
  cert = _certify.certify_patch(apply_fn, params, digits, 10, **opts)
  assert used and used[0] is not None  # the band path ran
  masks = _ablate.position_masks((28, 28, 1), ablation, size)
  want = _ablate.patch_counts(apply_fn, params, digits, masks, 10, batch, "float32", threshold)
  assert np.array_equal(cert.counts, want)
  assert len(np.unique(want)) > 3  # the positions do not all vote alike
  if threshold is None:
    assert cert.counts.sum(axis=1).tolist() == [28] * len(digits)


def test_other_classifiers_and_masks_take_the_generic_path(digits, monkeypatch):
  model, apply_fn, params = _lenet(normalize="mnist")  # zeros are not zeros once normalized
  assert _band.band_lenet(apply_fn, params) is None
  masks = _ablate.position_masks((28, 28, 1), "column", 2)
  assert _band.band_counts(apply_fn, params, digits, masks, 10) is None
  monkeypatch.setattr(_ablate, "patch_counts", lambda *a: np.full((len(digits), 10), -1))
  cert = _certify.certify_patch(apply_fn, params, digits, 10, ablation="column", size=2)
  assert (cert.counts == -1).all()  # the generic path ran
  _, plain_fn, plain = _lenet()
  assert _band.band_lenet(lambda p, z: plain_fn(p, z), plain) is None  # not a model's forward
  assert _band.band_lenet(plain_fn, plain) is not None
  for ablation, size in (("block", 2), ("column", 25)):  # not bands; no column saved
    m = _ablate.position_masks((28, 28, 1), ablation, size)
    assert _band.band_plan(m, (5, 5), 2) is None
    assert _band.band_counts(plain_fn, plain, digits, m, 10) is None
