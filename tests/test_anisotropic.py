"""rsjax.ucan: UCAN regions against exact ground truth on linear classifiers."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.stats as st

import rsjax
from rsjax import ucan as an

D = 8


def allowed_failures(num, alpha):
  """More failures than this has probability < 1e-4 for a sound bound (as in test_certify)."""
  return int(st.binom.ppf(1 - 1e-4, num, alpha))


def linear_apply(params, x):
  w, b = params
  z = x.reshape(x.shape[0], -1) @ w + b
  return jnp.stack([-z, z], axis=-1)


def make_problem(num, seed):
  rng = np.random.default_rng(seed)
  w = rng.normal(size=D).astype(np.float32)
  b = np.float32(0.1)
  x = rng.uniform(-0.5, 0.5, size=(num, D)).astype(np.float32)
  sigma = rng.uniform(0.1, 1.0, size=(num, D)).astype(np.float32)
  mu = rng.uniform(-0.2, 0.2, size=D).astype(np.float32)
  return rng, (w, b), x, sigma, mu


def test_gaussian_region_sound_and_tight_on_linear_classifier():
  rng, (w, b), x, sigma, mu = make_problem(100, 0)
  cert = an.certify(
    3,
    linear_apply,
    (jnp.asarray(w), jnp.asarray(b)),
    x,
    sigma=sigma,
    mu=mu,
    num_classes=2,
    n0=100,
    n=20_000,
    alpha=0.001,
    batch_size=20_000,
  )
  assert isinstance(cert, rsjax.Certificate) and cert.sound and cert.norm == "l2"
  w64, s64 = w.astype(np.float64), sigma.astype(np.float64)
  z = (x + mu).astype(np.float64) @ w64 + b
  ws = np.linalg.norm(w64 * s64, axis=1)
  r_exact = np.abs(z) / ws  # p_A = Phi(|z| / ||w * sigma||_2), so R_true = Phi^-1(p_A)
  label = (z > 0).astype(int)
  certified = cert.prediction != -1
  assert 0.5 < certified.mean() < 1.0
  failures = (cert.normalized_radius > r_exact + 1e-9) | (certified & (cert.prediction != label))
  assert failures.sum() <= allowed_failures(len(x), 0.001)
  ok = certified & ~failures
  # Tight: the Clopper-Pearson bound at n = 20k loses little of the exact radius.
  assert np.median(cert.normalized_radius[ok] / r_exact[ok]) > 0.8

  # Worst-case delta along -sign(z) * sigma * (w * sigma): ||delta / sigma||_2 = t exactly.
  u = -np.sign(z)[:, None] * (w64 * s64) / ws[:, None]
  at_r = u * cert.normalized_radius[:, None] * s64
  assert np.all(
    an.in_certified_region(at_r[ok] * (1 - 1e-9), sigma[ok], cert.normalized_radius[ok])
  )
  beyond = u * (r_exact * (1 + 1e-3))[:, None] * s64
  assert not np.any(an.in_certified_region(beyond[ok], sigma[ok], cert.normalized_radius[ok]))
  flipped = (x + mu + beyond) @ w64 + b  # the smoothed class really flips there
  assert np.all(np.sign(flipped[ok]) == -np.sign(z[ok]))

  # Isotropic radius min(sigma) * R is a sound L2 ball: below the distance to the boundary.
  np.testing.assert_allclose(cert.radius, s64.min(1) * cert.normalized_radius, rtol=1e-12)
  dist = np.abs(z) / np.linalg.norm(w64)
  assert np.all(cert.radius[ok] <= dist[ok] + 1e-9)
  assert np.all(cert.radius[~certified] == 0) and np.all(cert.normalized_radius[~certified] == 0)
  assert "held fixed" in cert.guarantee and "||delta / sigma||_2" in cert.guarantee


def test_laplace_l1_region_on_axis_classifier():
  rng = np.random.default_rng(4)
  num = 60
  t = rng.uniform(0.05, 0.6, size=num) * rng.choice([-1, 1], size=num)
  x = rng.uniform(size=(num, 4)).astype(np.float32)
  x[:, 0] = t
  sigma = rng.uniform(0.2, 1.0, size=(num, 4)).astype(np.float32)

  def axis_apply(params, x):
    z = x.reshape(x.shape[0], -1)[:, 0]
    return jnp.stack([-z, z], axis=-1)

  cert = an.certify(
    7,
    axis_apply,
    None,
    x,
    sigma=sigma,
    num_classes=2,
    noise="laplace",
    n0=100,
    n=20_000,
    alpha=0.001,
    batch_size=20_000,
  )
  assert cert.norm == "l1"
  # p_A = 1 - exp(-|x_0| / sigma_0) / 2, so R_true = -log(2 (1 - p_A)) = |x_0| / sigma_0.
  r_exact = np.abs(x[:, 0].astype(np.float64)) / sigma[:, 0]
  certified = cert.prediction != -1
  failures = (cert.normalized_radius > r_exact + 1e-6) | (
    certified & (cert.prediction != (x[:, 0] > 0))
  )
  assert failures.sum() <= allowed_failures(num, 0.001)
  assert np.median(cert.normalized_radius[certified] / r_exact[certified]) > 0.8


def test_mu_shift_cancels_and_key_not_consumed():
  _, (w, b), x, sigma, mu = make_problem(6, 1)
  params = (jnp.asarray(w), jnp.asarray(b))
  key = jax.random.key(11)
  kw = dict(num_classes=2, n0=50, n=2_000, batch_size=1_000)
  with_mu = an.certify(key, linear_apply, params, x, sigma=sigma, mu=mu, **kw)
  shifted = an.certify(key, linear_apply, params, x + mu, sigma=sigma, **kw)
  np.testing.assert_array_equal(with_mu.counts, shifted.counts)
  np.testing.assert_array_equal(with_mu.normalized_radius, shifted.normalized_radius)
  counts = rsjax.sample_counts(
    jax.random.fold_in(key, 1),
    linear_apply,
    params,
    x + mu,
    sigma=sigma,
    num_classes=2,
    num=2_000,
    batch_size=1_000,
  )
  np.testing.assert_array_equal(with_mu.counts, counts)
  # Constant sigma: the same numbers as the core isotropic certify.
  core = rsjax.certify(key, linear_apply, params, x, sigma=0.5, **kw)
  iso = an.certify(key, linear_apply, params, x, sigma=0.5, **kw)
  np.testing.assert_array_equal(core.prediction, iso.prediction)
  np.testing.assert_allclose(core.radius, iso.radius, rtol=1e-12)
  np.testing.assert_allclose(iso.alm, iso.radius, rtol=1e-6)
  # Shared [*input_shape] sigma equals its per-input broadcast.
  shared = an.certify(key, linear_apply, params, x, sigma=sigma[0], **kw)
  full = an.certify(key, linear_apply, params, x, sigma=np.broadcast_to(sigma[0], x.shape), **kw)
  np.testing.assert_array_equal(shared.counts, full.counts)


def test_region_helpers_and_alm():
  sigma = np.array([[1.0, 4.0], [2.0, 2.0]])
  r = np.array([1.5, 0.5])
  np.testing.assert_allclose(an.isotropic_radius(r, sigma), [1.5, 1.0])
  np.testing.assert_allclose(an.alm(r, sigma), [3.0, 1.0])  # sqrt(1 * 4) * 1.5
  d = 5
  s = np.random.default_rng(0).uniform(0.2, 3.0, size=d)
  # Equal volume: (ALM / R)^d = prod(sigma).
  np.testing.assert_allclose((an.alm(2.0, s) / 2.0) ** d, np.prod(s), rtol=1e-10)
  assert an.alm(1.0, s) >= an.isotropic_radius(1.0, s)
  delta = np.array([[0.6, 0.8], [0.6, 0.8]])
  sig = np.array([[1.0, 1.0], [0.5, 1.0]])
  np.testing.assert_array_equal(an.in_certified_region(delta, sig, 1.0 + 1e-12), [True, False])
  np.testing.assert_array_equal(an.in_certified_region(delta, sig, 1.41, "l1"), [True, False])
  np.testing.assert_array_equal(an.in_certified_region(delta, sig, 1.2, "linf"), [True, True])
  np.testing.assert_allclose(an.normalized_radius([0.5, st.norm.cdf(1.3)]), [0.0, 1.3], rtol=1e-9)
  np.testing.assert_allclose(an.normalized_radius([1 - 0.5 * np.exp(-0.7)], noise="laplace"), [0.7])
  with pytest.raises(ValueError, match="dim"):
    an.normalized_radius([0.9], noise="uniform_linf")
  with pytest.raises(ValueError, match="sigma"):
    an.isotropic_radius(np.ones(3), np.ones((2, 4)))
  with pytest.raises(ValueError, match="norm"):
    an.in_certified_region(delta, sig, 1.0, "l3")


@pytest.mark.parametrize(
  "pattern,corner", [("l2", 0.2 * 2 + 0.8), ("l1", 0.2 * 4 + 0.8), ("linf", 0.2 + 0.8)]
)
def test_pattern_sigma(pattern, corner):
  p = an.pattern_sigma((5, 7, 3), pattern=pattern)
  assert p.shape == (5, 7, 3) and p.dtype == np.float32
  np.testing.assert_allclose(p[2, 3], 0.8, rtol=1e-6)  # centre
  for i, j in [(0, 0), (0, 6), (4, 0), (4, 6)]:
    np.testing.assert_allclose(p[i, j], corner, rtol=1e-6)
  np.testing.assert_array_equal(p[..., 0], p[..., 2])  # shared across channels
  assert p.min() == pytest.approx(0.8) and p.max() == pytest.approx(corner)
  # Edge midpoint (1, 0) has norm 1 for every p.
  np.testing.assert_allclose(an.pattern_sigma((5, 5), pattern=pattern)[0, 2], 1.0, rtol=1e-6)
  with pytest.raises(ValueError, match="pattern"):
    an.pattern_sigma((5, 5), pattern="l3")


def test_input_dependent_refused_or_labelled():
  _, (w, b), x, sigma, mu = make_problem(4, 2)
  params = (jnp.asarray(w), jnp.asarray(b))
  kw = dict(num_classes=2, n0=50, n=2_000, batch_size=1_000)
  source = an.InputDependentNoise(lambda x_: (mu, sigma))  # rate inf: computed from x
  assert source.evaluate(x).rate == np.inf
  with pytest.raises(ValueError, match="input-dependent noise.*not sound"):
    an.certify(0, linear_apply, params, x, sigma=source, **kw)
  bad = an.certify(0, linear_apply, params, x, sigma=source, allow_unsound=True, **kw)
  good = an.certify(0, linear_apply, params, x, sigma=sigma, mu=mu, **kw)
  assert not bad.sound and good.sound
  assert bad.guarantee.startswith("NOT A CERTIFICATE") and "NOT A CERTIFICATE" not in good.guarantee
  np.testing.assert_array_equal(bad.radius, good.radius)  # same numbers, only the label differs


def test_frozen_noise_is_the_raw_arrays():
  _, (w, b), x, sigma, mu = make_problem(5, 3)
  params = (jnp.asarray(w), jnp.asarray(b))
  kw = dict(num_classes=2, n0=50, n=2_000, batch_size=1_000, ids=np.arange(7, 12))
  frozen = an.FrozenNoise(sigma[0], mu=mu)
  values = frozen.evaluate(x)
  assert isinstance(frozen, rsjax.SigmaSource) and values.rate == 0.0
  assert values.sigma.shape == values.mu.shape == x.shape and values.slack.shape == (5,)
  raw = an.certify(4, linear_apply, params, x, sigma=sigma[0], mu=mu, **kw)
  src = an.certify(4, linear_apply, params, x, sigma=frozen, **kw)
  assert raw.sound and src.sound and raw.guarantee == src.guarantee
  for field in (
    "prediction",
    "counts",
    "counts_selection",
    "p_lower",
    "radius",
    "normalized_radius",
    "alm",
  ):
    np.testing.assert_array_equal(getattr(src, field), getattr(raw, field))
  with pytest.raises(ValueError, match="mu must be None"):
    an.certify(4, linear_apply, params, x, sigma=frozen, mu=mu, **kw)
  # A source with one scale per input ([B], e.g. an IDRS design) is isotropic per input;
  # its rate 0.05 > 0 is no anisotropic certificate.
  knn = rsjax.idrs.KnnSigma(x + 1.0, 0.5, 0.05, k=2, m=1.0)
  per_input = knn.evaluate(x).sigma
  with pytest.raises(ValueError, match="not sound"):
    an.certify(4, linear_apply, params, x, sigma=knn, **kw)
  iso = an.certify(4, linear_apply, params, x, sigma=knn, allow_unsound=True, **kw)
  ref = an.certify(4, linear_apply, params, x, sigma=per_input[:, None] * np.ones_like(x), **kw)
  np.testing.assert_array_equal(iso.counts, ref.counts)
  assert not iso.sound and ref.sound


def test_bad_arguments():
  x = np.zeros((3, 4), np.float32)
  kw = dict(num_classes=2, n0=10, n=1_000)
  with pytest.raises(ValueError, match="sigma"):
    an.certify(0, linear_apply, None, x, sigma=np.ones(5), **kw)
  with pytest.raises(ValueError, match="sigma"):
    an.certify(0, linear_apply, None, x, sigma=np.array([1.0, 0.0, 1.0, 1.0]), **kw)
  with pytest.raises(ValueError, match="mu"):
    an.certify(0, linear_apply, None, x, sigma=1.0, mu=np.ones((2, 4)), **kw)


def test_universal_noise_and_loss_step_grows_min_sigma():
  gen = an.UniversalNoise((2, 3), scale=1.2)
  params = gen.init(mu0=0.1, sigma0=0.6)
  mu, sigma = gen(params)
  np.testing.assert_allclose(mu, 0.1, rtol=1e-5)
  np.testing.assert_allclose(sigma, 0.6, rtol=1e-5)
  # Make one entry the unique minimum.
  params = {"a": params["a"], "b": params["b"].at[1, 2].set(0.2)}
  x = jnp.zeros((4, 2, 3))
  y = jnp.array([0, 1, 0, 1])
  eps = jax.random.normal(jax.random.key(0), (5, 4, 2, 3))

  def const_logits(z):  # the CE term has zero gradient
    return jnp.zeros((z.shape[0], 3))

  def loss(p):
    m, s = gen(p)
    return an.universal_loss(const_logits, x, y, eps, mu=m, sigma=s)

  l0 = loss(params)
  np.testing.assert_allclose(l0, 5 * np.log(3) - 25 * float(gen(params)[1].min()), rtol=1e-5)
  opt = optax.sgd(0.1)
  grads = jax.grad(loss)(params)
  updates, _ = opt.update(grads, opt.init(params), params)
  new = optax.apply_updates(params, updates)
  s_old, s_new = np.asarray(gen(params)[1]), np.asarray(gen(new)[1])
  assert s_new.min() > s_old.min()
  changed = s_new != s_old
  assert changed.sum() == 1 and changed[1, 2]
  np.testing.assert_array_equal(gen(new)[0], gen(params)[0])  # mu has zero gradient here

  # With a classifier that reads the input, the CE term moves mu and sigma too.
  w = jnp.arange(6.0).reshape(6, 1) / 6

  def lin(z):
    flat = z.reshape(z.shape[0], -1)
    return jnp.concatenate([flat @ w, -flat @ w, jnp.zeros((z.shape[0], 1))], axis=1)

  g = jax.grad(lambda p: an.universal_loss(lin, x, y, eps, mu=gen(p)[0], sigma=gen(p)[1]))(params)
  assert np.any(np.asarray(g["a"]) != 0)
