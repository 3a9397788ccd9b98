"""Tests of serialized randomized smoothing for DEQs (rsjax.srs.srs_sample / certify)."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from golden_cases import LinearDEQ  # z = A z + W x, logits [0, v.z + b]
from scipy import stats as st

import rsjax
from rsjax import models, srs, stats


def _linear_deq(key, d_in=3, d=8, rho=0.9):
  ka, kw, kv = jax.random.split(key, 3)
  q, _ = jnp.linalg.qr(jax.random.normal(ka, (d, d)))
  a = (q * jnp.linspace(0.0, rho, d)) @ q.T
  params = {
    "A": a,
    "W": jax.random.normal(kw, (d, d_in)),
    "v": jax.random.normal(kv, (d,)),
    "b": jnp.float32(0.0),
  }
  w = np.asarray(params["W"]).T @ np.linalg.solve(
    np.eye(d) - np.asarray(a).T, np.asarray(params["v"])
  )
  return LinearDEQ(), params, w.astype(np.float64)


def _inputs_at_margins(w, margins):
  """Inputs x with w.x = margin * ||w|| (signed distance to the boundary)."""
  u = w / np.linalg.norm(w)
  return np.stack([0.5 + mg * u for mg in margins]).astype(np.float32)


def _true_pa(w, x, sigma):
  """P[class of sign(w.(x+eps))] for the predicted class, and its class."""
  dist = (x.astype(np.float64) @ w) / np.linalg.norm(w)
  cls = (dist > 0).astype(int)
  return st.norm.cdf(np.abs(dist) / sigma), cls


# ---------------------------------------------------------------------------
# Host statistics of the two-stage certificate.


def test_srs_bound_never_exceeds_uncorrected_bound():
  rng = np.random.default_rng(0)
  n = rng.integers(1, 5000, 3000)
  n_a = (rng.random(3000) * (n + 1)).astype(int).clip(0, n)
  m_a = rng.integers(0, 500, 3000)
  k = (rng.random(3000) * (m_a + 1)).astype(int).clip(0, m_a)
  for alpha in (0.001, 0.05):
    p, r = srs.srs_p_lower(n_a, n, k, m_a, alpha)
    plain = stats.clopper_pearson_lower(n_a, n, alpha)
    assert np.all(p <= plain + 1e-12)
    assert np.all(p <= stats.clopper_pearson_lower(n_a, n, alpha / 2) + 1e-12)
    assert np.all((r >= 0) & (r <= 1))
    # The authors' code's form is never more conservative than the paper's (where
    # N r >= 1 trials remain; below that it gives 0).
    p_code, _ = srs.srs_p_lower(n_a, n, k, m_a, alpha, correction="authors_code")
    big = n * r >= 1
    assert np.all(p_code[big] >= p[big] - 1e-12) and np.all(p_code[~big] == 0)
  # No mismatch seen: r = (alpha/2)^(1/m_A), paper bound = LCB(N_A r, N, alpha/2).
  p, r = srs.srs_p_lower(1000, 1000, 200, 200, 0.001)
  np.testing.assert_allclose(r, 0.0005 ** (1 / 200))
  np.testing.assert_allclose(p, st.beta.ppf(0.0005, 1000 * r, 1000 - 1000 * r + 1))
  # No check sample of the class: nothing certified.
  p, r = srs.srs_p_lower(1000, 1000, 0, 0, 0.001)
  assert p == 0 and r == 0
  with pytest.raises(ValueError, match="correction"):
    srs.srs_p_lower(1, 2, 1, 1, 0.1, correction="none")


def _simulate_two_stage(rng, trials, n, m, p_a, flip_in, flip_out, alpha, run=1):
  """Two-stage bounds on simulated (SRS, DEQ) label pairs.

  DEQ labels t_j ~ Bernoulli(p_a) i.i.d. (1 = top class). SRS labels copy t_j but
  are flipped to the top class with prob ``flip_in`` and away from it with prob
  ``flip_out``; flips come in runs of ``run`` consecutive samples (chain-like
  dependence). Check positions are uniform with replacement.
  """
  t = rng.random((trials, n)) < p_a
  nb = -(-n // run)
  u_in = np.repeat(rng.random((trials, nb)) < flip_in, run, axis=1)[:, :n]
  u_out = np.repeat(rng.random((trials, nb)) < flip_out, run, axis=1)[:, :n]
  s = np.where(t, ~u_out, u_in)
  n_a = s.sum(1)
  idx = rng.integers(0, n, (trials, m))
  s_c = np.take_along_axis(s, idx, 1)
  t_c = np.take_along_axis(t, idx, 1)
  m_a = s_c.sum(1)
  k = (s_c & t_c).sum(1)
  p_paper, _ = srs.srs_p_lower(n_a, n, k, m_a, alpha)
  p_naive = stats.clopper_pearson_lower(n_a, n, alpha)
  return p_paper, p_naive


@pytest.mark.parametrize("run", [1, 25])
def test_two_stage_coverage_under_simulated_mismatch(run):
  """The final bound exceeds the true p_A in at most ~alpha of the trials, while
  Clopper-Pearson on the SRS counts alone (the same counts, no correction) does
  so almost always when SRS over-reports the top class."""
  rng = np.random.default_rng(123 + run)
  alpha, trials, n, m, p_a = 0.2, 2000, 1000, 200, 0.7
  p_paper, p_naive = _simulate_two_stage(rng, trials, n, m, p_a, 0.25, 0.02, alpha, run)
  fail = np.mean(p_paper > p_a)
  assert fail <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / trials)
  assert np.mean(p_naive > p_a) > 0.9
  assert np.all(p_paper <= p_naive)
  # Exactly matching labels: the bound is still valid and close to CP at alpha/2.
  p_same, _ = _simulate_two_stage(rng, trials, n, m, p_a, 0.0, 0.0, alpha, run)
  assert np.mean(p_same > p_a) <= alpha / 2 + 3 * np.sqrt(alpha / 2 / trials)
  assert np.mean(p_same) > p_a - 0.08


def test_srs_certificate_from_counts():
  c0 = np.array([[90, 10], [10, 90], [40, 60]])
  c1 = np.array([[1000, 0], [100, 900], [500, 500]])
  s = np.array([[0] * 100, [1] * 90 + [0] * 10, [0] * 100])
  t = s.copy()
  t[1, :5] = 0  # five mismatches of class 1
  cert = srs.srs_certificate(c0, c1, s, t, n=1000, alpha=0.001, scale=0.5)
  assert isinstance(cert, rsjax.Certificate)
  np.testing.assert_array_equal(cert.prediction, [0, 1, -1])
  np.testing.assert_array_equal(cert.check_selected, [100, 90, 0])
  np.testing.assert_array_equal(cert.check_agree, [100, 85, 0])
  r1 = st.beta.ppf(0.0005, 85, 90 - 85 + 1)
  p1 = st.beta.ppf(0.0005, 900 * r1, 1000 - 900 * r1 + 1)
  np.testing.assert_allclose(cert.p_lower[1], p1)
  np.testing.assert_allclose(cert.radius[1], 0.5 * st.norm.ppf(p1))
  assert cert.radius[2] == 0 and cert.p_lower[2] == 0
  assert "paper form" in cert.guarantee
  code = srs.srs_certificate(
    c0, c1, s, t, n=1000, alpha=0.001, scale=0.5, correction="authors_code"
  )
  assert np.all(code.p_lower >= cert.p_lower) and "NOT a proven guarantee" in code.guarantee
  # The code's class comes from the check subset: class 0 for input 2, whose
  # certified class (from the n0 pass) is 1.
  assert code.check_class[2] == 0 and cert.check_class[2] == 1
  with pytest.raises(ValueError, match="missing"):
    srs.srs_certificate(c0, c1, np.full_like(s, -1), t, n=1000, alpha=0.001, scale=0.5)


# ---------------------------------------------------------------------------
# Device sampler.


def _reference_srs(
  deq_fn, params, x, sigma, key, num, chains, solver, warmup, check_idx, check_solver
):
  """Python loop over chunks for one input: counts, SRS labels, full-solver labels."""
  k_i = jax.random.fold_in(key, 0)
  gauss = rsjax.noise.get_noise("gaussian")  # the engine's unit Gaussian sampler
  eps = jax.vmap(lambda j: gauss.sample(jax.random.fold_in(k_i, j), x.shape))(
    jnp.arange(num, dtype=jnp.uint32)
  )
  xn = x[None] + sigma * eps
  deq_fn = jax.jit(deq_fn, static_argnums=3)
  labels = np.zeros(num, int)
  z = None
  for t in range(-(-num // chains)):
    idx = np.arange(t * chains, (t + 1) * chains)
    batch = xn[np.minimum(idx, num - 1)]
    logits, res = deq_fn(params, batch, z, warmup if t == 0 else solver)
    z = res.z
    ok = idx < num
    labels[idx[ok]] = np.asarray(jnp.argmax(logits, -1))[ok]
  full = np.asarray(jnp.argmax(deq_fn(params, xn[check_idx], None, check_solver)[0], -1))
  return np.bincount(labels, minlength=2), labels[check_idx], full


def test_srs_sampler_matches_reference_loop(getkey):
  deq_fn, params, w = _linear_deq(getkey())
  x = _inputs_at_margins(w, [0.3])
  key, ckey = getkey(), getkey()
  sol = models.SolverConfig(name="iteration", steps=1)
  warm = models.SolverConfig(name="iteration", steps=4)
  full = models.SolverConfig(name="iteration", steps=80)
  # num=23, chains=5: 5 chunks, the last one partial; m=7 is not a multiple of 5.
  cfg = srs.SRSConfig(solver=sol, warmup=warm, check_solver=full, m=7)
  out = srs.srs_sample(
    key,
    deq_fn,
    params,
    x,
    sigma=0.5,
    num_classes=2,
    num=23,
    config=cfg,
    settings=rsjax.Sampling(batch_size=5),
    check_key=ckey,
  )
  idx = np.asarray(out.check_idx[0])
  assert idx.shape == (7,) and idx.min() >= 0 and idx.max() < 23
  np.testing.assert_array_equal(
    idx, np.asarray(srs.check_indices(ckey, 0, srs.make_srs_plan(23, 5, 7, 4)))
  )
  counts, s_ref, t_ref = _reference_srs(
    deq_fn, params, jnp.asarray(x[0]), 0.5, key, 23, 5, sol, warm, idx, full
  )
  np.testing.assert_array_equal(out.counts[0], counts)
  np.testing.assert_array_equal(out.srs_labels[0], s_ref)
  np.testing.assert_array_equal(out.check_labels[0], t_ref)
  assert int(out.counts.sum()) == 23
  assert np.isfinite(float(out.residual[0])) and float(out.check_residual[0]) < 1e-2
  # Same results on one device.
  one = srs.srs_sample(
    key,
    deq_fn,
    params,
    x,
    sigma=0.5,
    num_classes=2,
    num=23,
    config=cfg,
    settings=rsjax.Sampling(batch_size=5, devices=1),
    check_key=ckey,
  )
  for a, b in zip(out[:4], one[:4], strict=True):
    np.testing.assert_array_equal(a, b)


def test_srs_check_solves_run_in_equal_batches():
  """m check solves run in the fewest batches of at most `chains`, split evenly."""
  for m, chains, devices, batch, steps in (
    (420, 400, 1, 210, 2),
    (744, 400, 1, 372, 2),
    (400, 400, 1, 400, 1),
    (7, 5, 4, 2, 1),
    (0, 5, 1, 1, 0),
  ):
    plan = srs.make_srs_plan(10_000, chains, m, devices)
    assert (plan.check_batch, plan.check_steps) == (batch, steps), (m, chains, devices)
    assert plan.check_batch * plan.check_steps * devices >= m


def test_srs_with_full_solver_sees_the_engine_noise(getkey):
  """With the full solver in every chunk SRS labels = standard labels, so its counts
  equal the core engine's counts with the same key (same noise per sample)."""
  deq_fn, params, w = _linear_deq(getkey())
  x = _inputs_at_margins(w, [0.1, -0.2, 0.05])
  key = getkey()
  full = models.SolverConfig(steps=40, lam=1e-9)  # converged to float32 precision
  out = srs.srs_sample(
    key,
    deq_fn,
    params,
    x,
    sigma=0.4,
    num_classes=2,
    num=300,
    config=srs.SRSConfig(solver=full, warmup=full, m=0),
    settings=rsjax.Sampling(batch_size=64),
    ids=[5, 9, 2],
  )
  ref = rsjax.sample_counts(
    key,
    models.DEQApply(deq_fn, full),
    params,
    x,
    sigma=0.4,
    num_classes=2,
    num=300,
    batch_size=64,
    ids=[5, 9, 2],
  )
  np.testing.assert_array_equal(out.counts, ref)
  assert out.srs_labels.shape == (3, 0)


def test_certify_deq_sound_on_linear_deq(getkey):
  """SRS with one cheap step (labels differ from the converged DEQ) still certifies
  radii below the true radius of the smoothed linear classifier."""
  deq_fn, params, w = _linear_deq(getkey(), rho=0.95)
  sigma = 0.5
  margins = [0.9, -0.6, 0.3, 0.05]
  x = _inputs_at_margins(w, margins)
  p_true, cls = _true_pa(w, x, sigma)
  r_true = sigma * st.norm.ppf(p_true)
  srs_cfg = srs.SRSConfig(
    solver=models.SolverConfig("iteration", 1), warmup=models.SolverConfig("anderson", 5), m=150
  )
  cert = srs.certify(
    getkey(),
    deq_fn,
    params,
    x,
    sigma=sigma,
    num_classes=2,
    method="srs",
    solver=models.SolverConfig(steps=40, lam=1e-9),
    srs=srs_cfg,
    n0=50,
    n=2000,
    alpha=0.001,
    batch_size=100,
  )
  assert isinstance(cert, srs.SRSCertificate)
  assert np.all(cert.p_lower <= p_true)
  assert np.all(cert.radius <= r_true)
  ok = cert.prediction >= 0
  np.testing.assert_array_equal(cert.prediction[ok], cls[ok])
  assert ok[0] and cert.radius[0] > 0.5 * r_true[0]
  # One-step chains do mismatch the converged DEQ: the correction is active.
  assert np.any(cert.check_agree < cert.check_selected)
  assert np.all(cert.mismatch_upper > 0)
  assert "40 anderson steps" in cert.guarantee
  # Standard RS certifies the same classifier (lam=1e-9 once gave NaN for 1 of 8000
  # samples here; a breakdown of the Anderson solve is now a plain step).
  std_cert = srs.certify(
    getkey(),
    deq_fn,
    params,
    x,
    sigma=sigma,
    num_classes=2,
    method="standard",
    solver=models.SolverConfig(steps=40, lam=1e-9),
    n0=50,
    n=2000,
    alpha=0.001,
    batch_size=1000,
  )
  assert np.all(std_cert.p_lower <= p_true) and "standard RS" in std_cert.guarantee
  assert cert.sound and std_cert.sound


def test_srs_with_broyden_is_sound_on_linear_deq(getkey):
  """SRS-2B chains (Broyden warm-up and check solver too) certify radii below the
  true radius, and 2 Broyden steps per chunk disagree with the converged DEQ less
  often than 1 plain step."""
  deq_fn, params, w = _linear_deq(getkey(), rho=0.95)
  sigma = 0.5
  x = _inputs_at_margins(w, [0.9, -0.6, 0.3, 0.05])
  p_true, cls = _true_pa(w, x, sigma)
  srs_cfg = srs.SRSConfig(
    solver=models.SolverConfig("broyden", 2), warmup=models.SolverConfig("broyden", 5), m=150
  )
  kw = dict(
    sigma=sigma,
    num_classes=2,
    method="srs",
    solver="30B",
    n0=50,
    n=2000,
    alpha=0.001,
    batch_size=100,
  )
  key = getkey()
  cert = srs.certify(key, deq_fn, params, x, srs=srs_cfg, **kw)
  assert np.all(cert.p_lower <= p_true)
  assert np.all(cert.radius <= sigma * st.norm.ppf(p_true))
  ok = cert.prediction >= 0
  np.testing.assert_array_equal(cert.prediction[ok], cls[ok])
  assert ok[0] and "30 broyden steps" in cert.guarantee
  naive = srs.certify(
    key, deq_fn, params, x, srs=srs_cfg.replace(solver=models.SolverConfig("naive", 1)), **kw
  )

  def miss(c):
    return np.sum(c.check_selected - c.check_agree)

  assert miss(cert) < miss(naive)


def test_certify_deq_options_and_errors(getkey):
  deq_fn, params, w = _linear_deq(getkey())
  x = _inputs_at_margins(w, [0.8])
  srs_cfg = srs.SRSConfig(
    warmup=models.SolverConfig("iteration", 10),
    check_solver=models.SolverConfig("iteration", 60),
    m=40,
  )
  kw = dict(sigma=0.25, num_classes=2, n0=20, n=300, batch_size=50, alpha=0.01, srs=srs_cfg)
  a = srs.certify(7, deq_fn, params, x, **kw)
  b = srs.certify(7, deq_fn, params, x, **kw)
  np.testing.assert_array_equal(a.counts, b.counts)
  np.testing.assert_array_equal(a.p_lower, b.p_lower)
  assert a.prediction[0] == 1 and a.check_total == 40
  # Keys: selection noise is rsjax.certify's; the selection chunk (n0 <= chains) is
  # solved from z = 0 with the warm-up solver, so it equals standard RS with that solver.
  std = srs.certify(
    7,
    deq_fn,
    params,
    x,
    method="standard",
    solver=models.SolverConfig("iteration", 10),
    sigma=0.25,
    num_classes=2,
    n0=20,
    n=300,
    batch_size=50,
    alpha=0.01,
  )
  np.testing.assert_array_equal(std.counts_selection, a.counts_selection)
  with warnings.catch_warnings(record=True) as rec:
    warnings.simplefilter("always")
    c = srs.certify(
      7,
      deq_fn,
      params,
      x,
      **dict(kw, srs=srs_cfg.replace(check="consecutive", correction="authors_code", m=5)),
    )
  assert any("never certify" in str(r.message) for r in rec)
  assert c.check_total == 5 and "NOT a proven guarantee" in c.guarantee
  assert a.sound and not c.sound
  np.testing.assert_array_equal(c.counts, a.counts)  # same noise, same chains
  with pytest.raises(ValueError, match="method"):
    srs.certify(7, deq_fn, params, x, method="fast", **kw)
  with pytest.raises(ValueError, match="correction"):
    srs_cfg.replace(correction="none")
  with pytest.raises(ValueError, match="check"):
    srs_cfg.replace(check="first")
  with pytest.raises(ValueError, match="consecutive"):
    srs.certify(7, deq_fn, params, x, **dict(kw, srs=srs_cfg.replace(check="consecutive", m=290)))
  with pytest.raises(ValueError, match="m must"):
    srs.certify(7, deq_fn, params, x, **dict(kw, srs=srs_cfg.replace(m=0)))
  with pytest.raises(ValueError, match="sigma"):
    srs.certify(7, deq_fn, params, x, **dict(kw, sigma=-1.0))
  with pytest.raises(TypeError, match="to_apply_fn"):  # the module itself, not apply_fn
    srs.certify(7, models.DEQClassifier(channels=4, rngs=0), params, x, **kw)
