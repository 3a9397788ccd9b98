"""Tests of the fixed-point solvers of rsjax.models and implicit differentiation (fast, CPU)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rsjax import models


def _affine_problem(key, b=4, d=20, norm=0.9, lo=0.0, dtype=jnp.float32):
  """Per-sample affine maps z -> A_i z + c_i, A_i symmetric with eigenvalues
  spread over [lo, norm] (plain iteration contracts by ``norm`` per step)."""
  ka, kc = jax.random.split(key)
  q, _ = jnp.linalg.qr(jax.random.normal(ka, (b, d, d), dtype))
  lam = jnp.linspace(lo, norm, d, dtype=dtype)
  a = jnp.einsum("bij,j,bkj->bik", q, lam, q)
  c = jax.random.normal(kc, (b, d), dtype)
  z_star = jnp.linalg.solve(jnp.eye(d, dtype=dtype)[None] - a, c[..., None])[..., 0]

  def f(z):
    return jnp.einsum("bij,bj->bi", a, z) + c

  return f, z_star


def _solve(f, z0, config, **kw):
  """Jitted ``models.solve`` (one compile instead of many eager dispatches)."""
  return jax.jit(lambda z: models.solve(f, z, config, **kw))(z0)


def _err(z, z_star):
  return np.asarray(jnp.linalg.norm(z - z_star, axis=1) / jnp.linalg.norm(z_star, axis=1))


@pytest.mark.parametrize("name", ["anderson", "iteration", "broyden"])
def test_solvers_reach_affine_fixed_point(getkey, name):
  f, z_star = _affine_problem(getkey(), norm=0.7, lo=-0.7)
  steps = 80 if name == "iteration" else 30
  r = _solve(f, jnp.zeros_like(z_star), name, steps=steps)
  assert r.z.shape == z_star.shape and r.residual.shape == (4,)
  assert np.all(_err(r.z, z_star) < 1e-3)
  assert np.all(np.asarray(r.residual) < 1e-3)
  assert int(r.steps) == steps
  # MDEQ's absolute ridge lam=1e-4 limits the accuracy on this tiny (D=20) problem;
  # with a smaller ridge Anderson converges to float32 precision.
  tight = models.SolverConfig(name=name, steps=steps, lam=1e-8)
  r = _solve(f, jnp.zeros_like(z_star), tight)
  assert np.all(_err(r.z, z_star) < 3e-5)


def test_anderson_beats_iteration_at_equal_steps(getkey):
  f, z_star = _affine_problem(getkey(), norm=0.95)
  z0 = jnp.zeros_like(z_star)

  def run(z, name, steps):
    return _solve(f, z, name, steps=steps)

  for steps in (8, 12, 20, 30):
    ra = run(z0, "anderson", steps)
    ri = run(z0, "iteration", steps)
    assert np.all(_err(ra.z, z_star) < _err(ri.z, z_star)), steps
    assert np.all(np.asarray(ra.residual) < np.asarray(ri.residual)), steps
  # Plain iteration contracts by about 0.95 per step; Anderson is far faster.
  assert np.all(
    _err(run(z0, "anderson", 20).z, z_star) < 0.3 * _err(run(z0, "iteration", 20).z, z_star)
  )


def test_anderson_mixing_and_memory(getkey):
  f, z_star = _affine_problem(getkey(), norm=0.9)
  z0 = jnp.zeros_like(z_star)
  plain = _solve(f, z0, "iteration", steps=40)
  for cfg in (
    models.SolverConfig(m=2, steps=40, lam=1e-8),
    models.SolverConfig(m=6, beta=0.7, steps=40, lam=1e-8),
  ):
    r = _solve(f, z0, cfg)
    assert np.all(_err(r.z, z_star) < 1e-2), cfg
  # Memory 1 is plain iteration (damped by beta).
  one = _solve(f, z0, models.SolverConfig(m=1, steps=40))
  np.testing.assert_allclose(one.z, plain.z, rtol=1e-5, atol=1e-5)
  damped = _solve(f, z0, models.SolverConfig(m=1, beta=0.5, steps=3))
  z = z0
  for _ in range(3):
    z = 0.5 * f(z) + 0.5 * z
  np.testing.assert_allclose(damped.z, z, rtol=1e-5, atol=1e-5)


def test_broyden_reaches_the_fixed_point_of_the_other_solvers(getkey):
  """On a contractive nonlinear map, 30 Broyden steps land on the fixed point that long
  plain iteration and Anderson reach."""
  k1, k2, k3 = jax.random.split(getkey(), 3)
  b, d = 5, 24
  w = jax.random.normal(k1, (d, d)) / jnp.sqrt(d)
  w = 0.9 * w / jnp.linalg.norm(w, 2)  # tanh is 1-Lipschitz: f contracts by 0.9
  c = jax.random.normal(k2, (b, d))

  def f(z):
    return jnp.tanh(z @ w.T + c)

  z0 = jax.random.normal(k3, (b, d))
  ref = _solve(f, z0, models.SolverConfig(name="iteration", steps=400)).z
  np.testing.assert_allclose(
    _solve(f, z0, models.SolverConfig(steps=40, lam=1e-8)).z, ref, atol=1e-4
  )
  rb = _solve(f, z0, "broyden", steps=30)
  np.testing.assert_allclose(rb.z, ref, atol=1e-4)
  assert np.all(np.asarray(rb.residual) < 1e-4)
  # On a slowly contracting affine map it is far faster than plain iteration.
  fa, za = _affine_problem(getkey(), norm=0.95)
  zero = jnp.zeros_like(za)
  assert np.all(
    _err(_solve(fa, zero, "broyden", steps=12).z, za)
    < 0.2 * _err(_solve(fa, zero, "iteration", steps=12).z, za)
  )
  # One Broyden step is one plain step; the paper's labels name the solvers.
  np.testing.assert_allclose(_solve(f, z0, "1B").z, f(z0), rtol=1e-6, atol=1e-6)
  assert models.as_solver_config("3B") == models.SolverConfig(name="broyden", steps=3)
  assert [models.as_solver_config(x).label for x in ("30A", "1n", "14B")] == ["30A", "1N", "14B"]


def test_anderson_falls_back_to_a_plain_step_when_the_solve_breaks_down():
  """A tiny ridge with repeated residuals makes the Anderson system singular; the
  affected step is a plain step instead of NaN."""
  c = jnp.ones((3, 20))
  for lam in (1e-9, 0.0):
    # f(z) = z + c: every residual is c, so G G^T is rank one.
    r = _solve(lambda z: z + c, jnp.zeros((3, 20)), models.SolverConfig(lam=lam, steps=8))
    np.testing.assert_allclose(r.z, 8.0 * c)
    # Started at the fixed point: all residuals vanish.
    r = _solve(
      lambda z: 0.5 * z + 1.0, jnp.full((3, 20), 2.0), models.SolverConfig(lam=lam, steps=40)
    )
    np.testing.assert_allclose(r.z, 2.0, atol=1e-6)
    assert np.all(np.isfinite(np.asarray(r.residual)))


def test_one_anderson_step_is_one_plain_step_and_residual_is_reported(getkey):
  f, z_star = _affine_problem(getkey())
  z0 = jax.random.normal(getkey(), z_star.shape)
  ra = _solve(f, z0, "anderson", steps=1)
  ri = _solve(f, z0, "iteration", steps=1)
  np.testing.assert_allclose(ra.z, f(z0), rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(ri.z, f(z0), rtol=1e-6, atol=1e-6)
  expect = jnp.linalg.norm(f(z0) - z0, axis=1) / (jnp.linalg.norm(f(z0), axis=1) + 1e-8)
  np.testing.assert_allclose(ra.residual, expect, rtol=1e-5)
  np.testing.assert_allclose(ri.residual, expect, rtol=1e-5)


@pytest.mark.parametrize("name", ["anderson", "iteration", "broyden"])
def test_warm_start_lowers_residual(getkey, name):
  f, z_star = _affine_problem(getkey(), norm=0.9)
  cold = _solve(f, jnp.zeros_like(z_star), name, steps=3)
  warm_init = z_star + 0.01 * jax.random.normal(getkey(), z_star.shape)
  warm = _solve(f, warm_init, name, steps=3)
  assert np.all(np.asarray(warm.residual) < np.asarray(cold.residual))
  assert np.all(_err(warm.z, z_star) < _err(cold.z, z_star))
  # Continuing from a result is a warm start too.
  again = _solve(f, cold.z, name, steps=3)
  assert np.all(np.asarray(again.residual) < np.asarray(cold.residual))


@pytest.mark.parametrize("name", ["anderson", "iteration", "broyden"])
def test_tolerance_early_stop_and_report(getkey, name):
  f, z_star = _affine_problem(getkey(), norm=0.5)
  z0 = jnp.zeros_like(z_star)
  r = _solve(f, z0, models.SolverConfig(name=name, steps=200, tol=1e-4))
  assert 1 < int(r.steps) < 200
  assert bool(jnp.all(r.converged)) and np.all(np.asarray(r.residual) <= 1e-4)
  # Report only: all steps run, convergence flagged per sample.
  r2 = _solve(f, z0, models.SolverConfig(name=name, steps=3, tol=1e-4, early_stop=False))
  assert int(r2.steps) == 3
  np.testing.assert_array_equal(r2.converged, np.asarray(r2.residual) <= 1e-4)
  assert not bool(jnp.any(r2.converged))


def test_per_sample_residuals_are_independent(getkey):
  """A sample's result does not depend on the other rows of the batch."""
  f, z_star = _affine_problem(getkey(), b=4, norm=0.9)
  z0 = jax.random.normal(getkey(), z_star.shape)
  full = _solve(f, z0, "anderson", steps=6)
  # Replace rows 1..3 by other states: row 0's result must not change.
  other = z0.at[1:].set(jax.random.normal(getkey(), z0[1:].shape))
  part = _solve(f, other, "anderson", steps=6)
  np.testing.assert_allclose(part.z[0], full.z[0], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(part.residual[0], full.residual[0], rtol=1e-5)
  assert not np.allclose(part.z[1:], full.z[1:])


def test_solver_config_validation():
  with pytest.raises(ValueError, match="solver"):
    models.SolverConfig(name="newton")
  with pytest.raises(ValueError, match="solver"):
    models.as_solver_config("3X")
  with pytest.raises(ValueError, match="steps"):
    models.SolverConfig(steps=0)
  with pytest.raises(ValueError, match="beta"):
    models.SolverConfig(beta=0.0)
  with pytest.raises(ValueError, match="tol"):
    models.SolverConfig(tol=-1.0)
  with pytest.raises(ValueError, match="m "):
    models.SolverConfig(m=0)
  assert models.SolverConfig(name="naive").name == "iteration"
  assert models.as_solver_config("A", 3) == models.SolverConfig(name="anderson", steps=3)
  hash(models.SolverConfig())


def _small_deq(key, dtype):
  kw, ku, kx = jax.random.split(key, 3)
  d, b = 6, 3
  w = 0.3 * jax.random.normal(kw, (d, d), dtype) / np.sqrt(d)
  u = jax.random.normal(ku, (d, d), dtype)
  x = jax.random.normal(kx, (b, d), dtype)

  def f(th, z):
    return jnp.tanh(z @ th["w"].T + x @ th["u"].T)

  return f, {"w": w, "u": u}, x


def test_implicit_gradient_matches_finite_differences(getkey):
  key = getkey()
  with jax.enable_x64(True):
    f, theta, x = _small_deq(key, jnp.float64)
    z0 = jnp.zeros_like(x)
    cfg = models.SolverConfig(steps=60)
    c = jnp.linspace(-1.0, 1.0, x.shape[0] * x.shape[1], dtype=jnp.float64).reshape(x.shape)

    @jax.jit
    def loss(th):
      return jnp.sum(c * models.implicit_fixed_point(f, th, z0, forward=cfg))

    g = jax.grad(loss)(theta)
    assert g["w"].dtype == jnp.float64
    eps = 1e-6
    for name in ("w", "u"):
      flat = np.asarray(theta[name]).ravel()
      fd = np.zeros_like(flat)
      for i in range(flat.size):
        e = np.zeros_like(flat)
        e[i] = eps
        plus = dict(theta, **{name: jnp.asarray((flat + e).reshape(theta[name].shape))})
        minus = dict(theta, **{name: jnp.asarray((flat - e).reshape(theta[name].shape))})
        fd[i] = (loss(plus) - loss(minus)) / (2 * eps)
      np.testing.assert_allclose(np.asarray(g[name]).ravel(), fd, rtol=1e-6, atol=1e-8)
    # The backward solver can differ from the forward one.
    g2 = jax.grad(
      lambda th: jnp.sum(
        c
        * models.implicit_fixed_point(
          f, th, z0, forward=cfg, backward=models.SolverConfig(name="iteration", steps=80)
        )
      )
    )(theta)
    np.testing.assert_allclose(g2["w"], g["w"], rtol=1e-6, atol=1e-9)


def test_implicit_gradient_float32_and_jit(getkey):
  f, theta, x = _small_deq(getkey(), jnp.float32)
  z0 = jnp.zeros_like(x)

  def loss_implicit(th):
    return jnp.sum(models.implicit_fixed_point(f, th, z0, forward="anderson") ** 2)

  def loss_unrolled(th):  # backprop through 60 plain iterations: same fixed point
    z = jax.lax.fori_loop(0, 60, lambda _, z: f(th, z), z0)
    return jnp.sum(z**2)

  g = jax.jit(jax.grad(loss_implicit))(theta)
  g_ref = jax.jit(jax.grad(loss_unrolled))(theta)
  for name in g:
    np.testing.assert_allclose(g[name], g_ref[name], rtol=1e-3, atol=1e-5)
  # z0 gets a zero gradient.
  gz = jax.grad(lambda z: jnp.sum(models.implicit_fixed_point(f, theta, z)))(z0)
  np.testing.assert_array_equal(gz, np.zeros_like(gz))


def test_jacobian_frobenius_estimate(getkey):
  b, d = 2, 10
  a = jax.random.normal(getkey(), (b, d, d))

  def f(z):
    return jnp.einsum("bij,bj->bi", a, z)

  exact = np.asarray(jnp.sum(a**2, axis=(1, 2)) / d)
  est = models.jacobian_frobenius_sq(getkey(), f, jnp.zeros((b, d)), num_vectors=400)
  assert est.shape == (b,)
  np.testing.assert_allclose(est, exact, rtol=0.2)
  # Differentiable with respect to what f closes over: d/da ||a||_F^2 / d = 2a/d.
  g = jax.grad(
    lambda aa: jnp.sum(
      models.jacobian_frobenius_sq(
        jax.random.key(0),
        lambda z: jnp.einsum("bij,bj->bi", aa, z),
        jnp.zeros((b, d)),
        num_vectors=1,
      )
    )
  )(a)
  assert g.shape == a.shape and bool(jnp.any(g != 0))


def test_anderson_gram_kept_by_rows_matches_the_history(getkey):
  """The Gram matrix updated one row per step equals G G^T of the ring buffer, also after
  the buffer wraps; a history longer than the step count changes nothing."""
  from rsjax.models import _solvers

  b, m, d = 3, 4, 10
  gs = jax.random.normal(getkey(), (9, b, d))
  G, gram = jnp.zeros((b, m, d)), jnp.zeros((b, m, m))
  for k in range(9):  # 9 residuals into 4 slots: wraps twice
    G, gram = _solvers._gram_update(G, gram, gs[k], k % m)
  np.testing.assert_allclose(gram, jnp.einsum("bid,bjd->bij", G, G), rtol=1e-5, atol=1e-5)
  f, z_star = _affine_problem(getkey(), norm=0.9)
  z0 = jnp.zeros_like(z_star)
  for steps in (2, 3, 5):
    np.testing.assert_array_equal(
      _solve(f, z0, models.SolverConfig(m=6, steps=steps)).z,
      _solve(f, z0, models.SolverConfig(m=steps, steps=steps)).z,
    )
