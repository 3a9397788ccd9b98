"""The ablation methods (``rsjax.ablation``): derandomized smoothing against patches and
randomized ablation against L0, against base classifiers whose smoothed votes are known
exactly (so a radius one too large fails), and their formulas written twice agreeing."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rsjax
from rsjax import claims
from rsjax.ablation import _ablate, _certify, _rules


def _marked(z):
  """``[b]`` 1.0 where an encoded image keeps a pixel whose value is > 1/2."""
  c = z.shape[-1] // 2
  return (jnp.max(z[..., :c], axis=(1, 2, 3)) > 0.5).astype(jnp.float32)


def votes_one(params, z):
  """Class 1 where a kept pixel is marked, else class 0 (equal logits: argmax's 0)."""
  h = _marked(z)
  return jnp.stack([jnp.zeros_like(h), h], -1)


def votes_zero(params, z):
  """Class 0 where a kept pixel is marked, else class 1."""
  h = _marked(z)
  return jnp.stack([h, jnp.full_like(h, 0.5)], -1)


def _patched(x, m, row=2, col=5):
  """``x`` with an ``m x m`` patch of ones at ``(row, col)`` (wrapping)."""
  out = x.copy()
  h, w = x.shape[1:3]
  for r in range(row, row + m):
    for c in range(col, col + m):
      out[:, r % h, c % w, :] = 1.0
  return out


@pytest.mark.parametrize(
  "fn, ablation, want",
  [
    # 12 bands of width 3, all for class 0: a patch of side m moves m + 2 votes to class 1.
    # m = 4: 6 against 6, the tie goes to class 0 (the smaller): certified; m = 5 flips.
    (votes_one, "column", 4),
    (votes_one, "row", 4),
    # All for class 1: at m = 4 the tie goes to class 0, so only m = 3 holds.
    (votes_zero, "column", 3),
    # 144 blocks of side 3: a patch of side m meets (m + 2)^2; m = 6: 64 against 80.
    (votes_one, "block", 6),
  ],
)
def test_patch_radius_is_the_true_one_with_its_tie_rule(fn, ablation, want):
  x = np.zeros((1, 12, 12, 1), np.float32)
  cert = _certify.certify_patch(fn, None, x, 2, ablation=ablation, size=3)
  assert cert.radius.tolist() == [want]
  assert cert.num_samples.tolist() == [144 if ablation == "block" else 12]
  top = int(cert.prediction[0])
  for col in (0, 5, 10):  # wherever the patch is: at the radius it holds, one more flips
    held = _certify.certify_patch(
      fn, None, _patched(x, want, col=col), 2, ablation=ablation, size=3
    )
    assert held.prediction.tolist() == [top]
    flip = _certify.certify_patch(
      fn, None, _patched(x, want + 1, col=col), 2, ablation=ablation, size=3
    )
    assert flip.prediction.tolist() == [1 - top]


def test_patch_rules_agree_with_the_claims_written_again():
  rng = np.random.default_rng(0)
  for ablation, p in (("column", 28), ("block", 784)):
    counts = rng.multinomial(p, rng.dirichlet(np.full(4, 0.3), 1)[0], size=300)
    counts[:20, 1] = counts[:20, 0]  # ties for the top place too
    counts[20:40] = np.sort(counts[20:40], axis=1)[:, ::-1]
    got = _rules.patch_radius(counts, ablation, 2, (28, 28, 1))
    predict, radius = claims.patch_certificate(counts, ablation, 2, 28, 28)
    assert np.array_equal(predict, _rules.smoothed_class(counts))
    assert np.array_equal(radius, got)
    assert got.max() > 0


def test_patch_counts_are_exact_whatever_the_batch():
  key = jax.random.key(3)
  w = jax.random.normal(key, (6 * 6 * 2, 5))
  fn = lambda params, z: z.reshape(z.shape[0], -1) @ params  # noqa: E731
  x = np.asarray(jax.random.uniform(jax.random.key(4), (3, 6, 6, 1)))
  masks = _ablate.position_masks(x.shape[1:], "block", 2)
  a = _ablate.patch_counts(fn, w, x, masks, 5, batch=1)
  b = _ablate.patch_counts(fn, w, x, masks, 5, batch=10_000)
  assert np.array_equal(a, b) and a.sum(axis=1).tolist() == [36] * 3
  assert masks.sum(axis=(1, 2)).tolist() == [4] * 36  # wrapped blocks keep s^2 pixels


def _kept_none(d, k, rho):
  return math.comb(d - rho, k) / math.comb(d, k)


def test_l0_radius_is_below_the_true_one():
  """All zeros: the votes are class 0 always. With ``rho`` ones, class 1 has probability
  ``1 - C(d - rho, k) / C(d, k)`` exactly; the smoothed class flips past 1/2."""
  d, k = 64, 8
  true = max(r for r in range(d - k + 1) if 1 - _kept_none(d, k, r) < 0.5)
  assert _rules.l0_radius(np.array([1.0]), d, k).tolist() == [true]  # p = 1: tight
  x = np.zeros((1, 8, 8, 1), np.float32)
  settings = rsjax.Sampling(n0=50, n=2000, alpha=0.001)
  batch = rsjax.cohen.Batch(0, votes_one, None, x, 1.0, 2, settings, np.array([3]))
  cert = _certify.L0Ablation(k).certify(batch)
  assert cert.prediction.tolist() == [0]
  assert true - 1 <= cert.radius[0] <= true
  for rho in (true, true + 1):  # the exact probability is what the keyed draws give
    xr = x.copy().reshape(-1)
    xr[:rho] = 1
    c = _ablate.l0_counts(votes_one, None, jax.random.key(1), xr.reshape(x.shape), [0], 4000, k, 2)
    assert abs(c[0, 1] / 4000 - (1 - _kept_none(d, k, rho))) < 0.03


def test_l0_rules_agree_with_the_claims_written_again():
  p = np.concatenate([np.linspace(0.4, 1.0, 61), [0.5, np.nextafter(0.5, 1), 0.999999]])
  for d, k in ((64, 8), (784, 45)):
    rho = _rules.l0_radius(p, d, k)
    ok, radius = claims.l0_certificate(p, d, k)
    assert np.array_equal(ok, rho >= 0)
    assert np.array_equal(radius, np.maximum(rho, 0))
    holds = [1 - _kept_none(d, k, int(r)) < q - 0.5 for q, r in zip(p, rho, strict=True) if r >= 0]
    assert all(holds)


def test_l0_draws_are_keyed_per_input_and_sample():
  w = jax.random.normal(jax.random.key(0), (8 * 8 * 2, 4))
  fn = lambda params, z: z.reshape(z.shape[0], -1) @ params  # noqa: E731
  x = np.asarray(jax.random.uniform(jax.random.key(1), (3, 8, 8, 1)))
  ids = np.array([7, 2, 9])
  one = _ablate.l0_counts(fn, w, jax.random.key(5), x, ids, 300, 10, 4, batch=7)
  big = _ablate.l0_counts(fn, w, jax.random.key(5), x, ids, 300, 10, 4, batch=5000)
  alone = _ablate.l0_counts(fn, w, jax.random.key(5), x[1:2], ids[1:2], 300, 10, 4)
  assert np.array_equal(one, big) and np.array_equal(one[1:2], alone)
  other = _ablate.l0_counts(fn, w, jax.random.key(5), x, ids + 1, 300, 10, 4)
  assert not np.array_equal(one, other)
  kept = _ablate.kept_pixels(jax.random.key(2), 64, 10)
  assert int(kept.sum()) == 10


def test_encoding_is_the_papers():
  x = jnp.array([[[[0.25], [0.0]]]])  # one image 1 x 2, one channel
  z = _ablate.encode(x, jnp.array([[[True, False]]]))
  assert z.tolist() == [[[[0.25, 0.75], [0.0, 0.0]]]]
  assert _ablate.encoded_shape((28, 28, 1)) == (28, 28, 2)
  assert _ablate.encoded_shape((32, 32, 3)) == (32, 32, 6)


def test_training_ablations_keep_what_they_say():
  from rsjax.ablation.training import ablate_patch, ablate_pixels

  x = np.random.default_rng(0).random((50, 8, 8, 1)).astype(np.float32)
  z = ablate_pixels(x, np.random.default_rng(1), 10)
  kept = z.sum(axis=-1) > 0.5  # x + (1 - x) = 1 at a kept pixel, 0 at an ablated one
  assert z.shape == (50, 8, 8, 2) and kept.sum(axis=(1, 2)).tolist() == [10] * 50
  assert np.allclose(z[..., 0][kept], x[..., 0][kept])
  z = ablate_patch(x, np.random.default_rng(2), "column", 3)
  cols = (z.sum(axis=-1) > 0.5).all(axis=1)  # [50, W]: the kept columns
  assert cols.sum(axis=1).tolist() == [3] * 50
  starts = [int(np.flatnonzero(c & ~np.roll(c, 1))[0]) for c in cols]
  assert all(c[(s + np.arange(3)) % 8].all() for c, s in zip(cols, starts, strict=True))
  assert len(set(starts)) > 1  # one random position per image


def test_patches_up_to_the_radius_never_change_the_class_with_multi_votes():
  """A random linear classifier voting for every class with softmax >= 0.2: random patches of
  random values, of every side up to each image's radius and anywhere, keep the class."""
  w = 0.3 * jax.random.normal(jax.random.key(7), (10 * 10 * 2, 3))
  params = (w, jnp.array([1.2, 0.0, 0.0]))
  fn = lambda p, z: z.reshape(z.shape[0], -1) @ p[0] + p[1]  # noqa: E731
  rng = np.random.default_rng(0)
  x = rng.random((8, 10, 10, 1)).astype(np.float32)
  opts = dict(ablation="column", size=2, threshold=0.2)
  cert = _certify.certify_patch(fn, params, x, 3, **opts)
  assert cert.counts.sum() > 8 * 10  # several classes vote at some positions
  assert np.array_equal(claims.patch_certificate(cert.counts, "column", 2, 10, 10)[1], cert.radius)
  tried = 0
  for i in np.flatnonzero(cert.radius > 0):
    for m in range(1, int(cert.radius[i]) + 1):
      for _ in range(4):
        xp = x[i : i + 1].copy()
        r, c = rng.integers(0, 10 - m + 1, 2)
        xp[0, r : r + m, c : c + m, 0] = rng.random((m, m)) > 0.5
        again = _certify.certify_patch(fn, params, xp, 3, **opts)
        assert again.prediction[0] == cert.prediction[i]
        tried += 1
  assert tried >= 20
