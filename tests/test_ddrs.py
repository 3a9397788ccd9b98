"""Tests of rsjax.ddrs: sigma optimization, memory-based certification, certify."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rsjax
from rsjax import ddrs

SLOPE = 10.0
W = jnp.array([[-SLOPE, 0.0, 0.0, 0.0], [SLOPE, 0.0, 0.0, 0.0]]) / 2


def linear_fn(p, x):
  """2 classes, boundary x0 = 0.5; logit gap SLOPE * (x0 - 0.5)."""
  return (x - 0.5) @ p.T


def _inputs(x0):
  x = np.full((len(x0), 4), 0.5, np.float32)
  x[:, 0] = x0
  return x


X0 = [0.52, 0.55, 0.6, 0.7, 0.85, 1.0, 0.45, 0.2]  # distances 0.02 ... 0.5, both classes


def test_optimize_sigma_increases_objective_and_follows_distance(getkey):
  x = _inputs(X0)
  sigma0 = 0.05
  sig = ddrs.optimize_sigma(
    getkey(), linear_fn, W, x, sigma0=sigma0, steps=100, lr=0.005, num_samples=64
  )
  assert sig.dtype == np.float32 and sig.shape == (len(X0),)
  assert np.all(sig >= 1e-3)
  k = getkey()
  r0 = ddrs.smoothing_objective(k, linear_fn, W, x, sigma=sigma0, num_samples=4096)
  r1 = ddrs.smoothing_objective(k, linear_fn, W, x, sigma=sig, num_samples=4096)
  assert r1.mean() > r0.mean() + 0.01
  dist = np.abs(np.asarray(X0) - 0.5)
  near, far = np.argmin(dist), np.argmax(dist)
  assert sig[far] > 2 * sig[near]
  # larger distance, larger sigma (rank correlation over all inputs)

  def rank(a):
    return np.argsort(np.argsort(a))

  assert np.corrcoef(rank(dist), rank(sig))[0, 1] > 0.8


def test_optimize_sigma_deterministic_and_compiled_once(getkey):
  traces = []

  def fn(p, x):
    traces.append(1)
    return linear_fn(p, x)

  key = getkey()
  x = _inputs(X0[:4])
  kw = dict(sigma0=0.1, steps=10, lr=0.01)
  a = ddrs.optimize_sigma(key, fn, W, x, **kw)
  n_traces = len(traces)
  assert n_traces > 0
  b = ddrs.optimize_sigma(key, fn, W, x, **kw)
  np.testing.assert_array_equal(a, b)
  c = ddrs.optimize_sigma(key, fn, W, _inputs(X0[4:]), **kw)  # new batch, same shape
  d = ddrs.optimize_sigma(key, fn, W, x, **dict(kw, lr=0.02))  # lr is traced too
  assert len(traces) == n_traces
  assert not np.array_equal(a, c) and not np.array_equal(a, d)
  e = ddrs.optimize_sigma(getkey(), fn, W, x, **kw)
  assert not np.array_equal(a, e)


def test_optimize_sigma_zero_steps_and_sigma_min(getkey):
  x = _inputs(X0[:3])
  s0 = np.array([0.1, 0.2, 0.3], np.float32)
  np.testing.assert_array_equal(
    ddrs.optimize_sigma(getkey(), linear_fn, W, x, sigma0=s0, steps=0), s0
  )
  # a huge negative-going step is stopped at sigma_min (the reference has no projection)

  def flat(p, x):
    return jnp.zeros((x.shape[0], 2)) + x[:, :1] * jnp.array([0.0, 1.0])

  s = ddrs.optimize_sigma(
    getkey(), flat, W, x, sigma0=0.1, steps=5, lr=1e3, sigma_min=0.01, num_samples=4
  )
  assert np.all(s >= 0.01)


def test_optimize_sigma_bad_arguments(getkey):
  x = _inputs(X0[:2])
  with pytest.raises(ValueError, match="sigma0"):
    ddrs.optimize_sigma(getkey(), linear_fn, W, x, sigma0=-1.0)
  with pytest.raises(ValueError, match="sigma0"):
    ddrs.optimize_sigma(getkey(), linear_fn, W, x, sigma0=np.ones(3))
  with pytest.raises(ValueError, match="clip"):
    ddrs.optimize_sigma(getkey(), linear_fn, W, x, sigma0=0.1, clip=(0.9, 0.1))
  with pytest.raises(ValueError, match="num_samples"):
    ddrs.optimize_sigma(getkey(), linear_fn, W, x, sigma0=0.1, num_samples=0)


# ----------------------------------------------------------------------------- memory


def test_memory_no_intersection_keeps():
  mem = ddrs.MemoryCertifier()
  assert mem.update(np.zeros(2), 0, 1.0) == (0, 1.0)
  assert mem.update(np.array([3.0, 0.0]), 1, 1.5) == (1, 1.5)  # d=3 >= 1 + 1.5
  assert mem.update(np.array([0.5, 0.0]), 0, 0.9) == (0, 0.9)  # overlaps class 0 only (2.5 >= 2.4)
  assert len(mem) == 3


def test_memory_largest_out_subset():
  mem = ddrs.MemoryCertifier()
  mem.update(np.zeros(2), 0, 1.0)
  mem.update(np.array([0.0, 10.0]), 0, 1.0)
  c, r = mem.update(np.array([3.0, 0.0]), 1, 2.5)  # d=3 < 1 + 2.5, outside: m = 2
  assert c == 1 and r == pytest.approx(2.0, abs=1e-12) and r <= 2.0
  c, r = mem.update(np.array([0.0, 4.0]), 1, 5.0)  # two balls in J: m = min(4-1, 6-1) = 3
  assert c == 1 and r == pytest.approx(3.0, abs=1e-12)


def test_memory_largest_in_subset_takes_explicit_argmin():
  mem = ddrs.MemoryCertifier()
  mem.update(np.zeros(2), 0, 2.0)
  mem.update(np.array([0.0, 0.5]), 2, 0.1)  # inside class 0's ball (m = 0.5 - 2 < 0)
  c_mem = mem.classes
  assert c_mem[1] == 0  # (0, 0.5) lies inside class 0's ball: relabelled, radius 1.5
  assert mem.radii[1] == pytest.approx(1.5, abs=1e-12)
  mem2 = ddrs.MemoryCertifier()
  mem2.update(np.array([0.0, 0.0]), 0, 1.0)
  mem2.update(np.array([5.0, 0.0]), 2, 4.5)  # d=5 >= 1 + 4.5? no, 5 < 5.5: m = 4, r -> 4
  assert mem2.radii[1] == pytest.approx(4.0, abs=1e-12)
  # new point at (4, 0): class 1, inside class-2 ball (d=1, r=4, m=-3) and near class 0 (m=3)
  c, r = mem2.update(np.array([4.0, 0.0]), 1, 0.5)
  assert c == 2 and r == pytest.approx(3.0, abs=1e-12)


def test_memory_abstain_recorded_without_ball():
  mem = ddrs.MemoryCertifier()
  assert mem.update(np.zeros(2), -1, 0.0) == (-1, 0.0)
  assert mem.update(np.array([0.1, 0.0]), 1, 5.0) == (1, 5.0)  # no ball from the abstention
  assert mem.update(np.array([0.2, 0.0]), -1, 0.0) == (-1, 0.0)  # abstain stays abstain
  assert len(mem) == 3 and list(mem.classes) == [-1, 1, -1]


def test_memory_invariant_on_random_points():
  rng = np.random.default_rng(0)
  for _ in range(5):
    mem = ddrs.MemoryCertifier()
    b = 200
    x = rng.uniform(0, 1, (b, 3, 2))
    cls = rng.integers(-1, 3, b)
    rad = np.where(cls >= 0, rng.uniform(0, 0.6, b), 0.0)
    out_c, out_r = mem.update_batch(x, cls, rad)
    kept = out_c == cls
    assert np.all(out_r[kept] <= rad[kept])  # a kept class only shrinks
    changed = (out_c != cls) | (out_r != rad)
    assert changed.any()  # the test exercises both branches
    assert np.any(out_c != cls) and np.any((out_c == cls) & (out_r < rad))
    assert np.all(out_c[cls == -1] == -1)
    flat = x.reshape(b, -1)
    d = np.linalg.norm(flat[:, None] - flat[None], axis=-1)
    ball = out_c >= 0
    diff = ball[:, None] & ball[None] & (out_c[:, None] != out_c[None])
    assert np.all(d[diff] >= (out_r[:, None] + out_r[None])[diff])
    np.testing.assert_array_equal(mem.classes, out_c)
    np.testing.assert_array_equal(mem.radii, out_r)


def test_memory_bad_arguments():
  mem = ddrs.MemoryCertifier()
  with pytest.raises(ValueError, match="radius"):
    mem.update(np.zeros(2), 0, -1.0)
  mem.update(np.zeros(2), 0, 1.0)
  with pytest.raises(ValueError, match="values"):
    mem.update(np.zeros(3), 0, 1.0)


# ----------------------------------------------------------------------------- certify


def test_certify_guarantees_and_memory(getkey):
  x = _inputs([0.9, 0.1, 0.52, 0.95])
  sig = np.array([0.1, 0.1, 0.3, 0.1], np.float32)
  key = getkey()
  kw = dict(sigma=sig, num_classes=2, n0=64, n=1000, alpha=0.01, batch_size=256)
  plain = ddrs.certify(key, linear_fn, W, x, **kw)
  assert "NOT A CERTIFICATE of a fixed classifier" in plain.guarantee
  assert not plain.memory_used and not plain.sound
  np.testing.assert_array_equal(plain.sigma, sig.astype(np.float64))
  assert plain.prediction[0] == 1 and plain.prediction[1] == 0
  assert plain.radius[0] > 0 and plain.radius[0] <= 0.4  # exact distance to the boundary
  mem = ddrs.MemoryCertifier()
  with_mem = ddrs.certify(key, linear_fn, W, x, memory=mem, **kw)
  assert "memory-based" in with_mem.guarantee and "this input order" in with_mem.guarantee
  assert "this deployment run" in with_mem.guarantee
  assert len(mem) == 4 and with_mem.sound
  np.testing.assert_array_equal(with_mem.prediction_mc, plain.prediction)
  want_c, want_r = ddrs.MemoryCertifier().update_batch(x, plain.prediction, plain.radius)
  np.testing.assert_array_equal(with_mem.prediction, want_c)
  np.testing.assert_array_equal(with_mem.radius, want_r)
  with pytest.raises(ValueError, match="sigma"):
    ddrs.certify(key, linear_fn, W, x, **dict(kw, sigma=0.1 * np.ones(3)))


# ----------------------------------------------------------------------------- the optimizer's optimum


STEEP = jnp.array([[-100.0, 0.0, 0.0, 0.0], [100.0, 0.0, 0.0, 0.0]]) / 2


def test_optimizer_reaches_known_optimum_on_a_hard_linear_model(getkey):
  # Nearly hard linear classifier (logit gap 100 (x0 - 1/2)) at distance d: psi_A ~
  # Phi(d / sigma), so with the clamp at 0.98 R(sigma) = sigma * Phi^-1(0.98) up to
  # sigma* = d / Phi^-1(0.98) and R -> d (its supremum, the exact distance to the
  # boundary) beyond: the ascent must climb past sigma* and reach R ~ d.
  d = np.array([0.1, 0.2, 0.3])
  x = _inputs(0.5 + d)
  z98 = float(jax.scipy.special.ndtri(0.98))
  sig = ddrs.optimize_sigma(
    getkey(), linear_fn, STEEP, x, sigma0=0.02, steps=100, lr=0.02, num_samples=16
  )
  np.testing.assert_array_less(0.85 * d / z98, sig)
  r = ddrs.smoothing_objective(getkey(), linear_fn, STEEP, x, sigma=sig, num_samples=4096)
  np.testing.assert_allclose(r, d, rtol=0.1)
  r0 = ddrs.smoothing_objective(getkey(), linear_fn, STEEP, x, sigma=0.02, num_samples=4096)
  np.testing.assert_allclose(r0, 0.02 * z98, rtol=1e-3)


def test_paper_settings_barely_move_sigma(getkey):
  # |dR/dsigma| <= (Phi^-1(0.98) - Phi^-1(0.02)) / 2 + (noise term); K = 100 steps of
  # 1e-4 move sigma by ~0.02 at most: the paper's defaults keep sigma near sigma0.
  x = _inputs(0.5 + np.array([0.1, 0.2, 0.3]))
  sig, path = ddrs.optimize_sigma(getkey(), linear_fn, STEEP, x, sigma0=0.02, return_path=True)
  assert path.shape == (101, 3)
  np.testing.assert_array_equal(path[0], np.float32(0.02))
  np.testing.assert_array_equal(path[-1], sig)
  assert np.all(np.abs(sig - 0.02) <= 100 * 1e-4 * 2.1)


def test_uniform_variant_radius_is_yang_l1(getkey):
  x = _inputs([0.9, 0.1, 0.7])
  lam = np.array([0.3, 0.5, 0.2], np.float32)
  cert = ddrs.certify(
    getkey(),
    linear_fn,
    W,
    x,
    sigma=lam,
    num_classes=2,
    n0=64,
    n=2000,
    alpha=0.01,
    batch_size=500,
    noise="uniform",
  )
  ok = cert.prediction >= 0
  assert ok.all()
  np.testing.assert_allclose(cert.radius, 2 * lam * (cert.p_lower - 0.5), rtol=1e-6)
  assert "NOT A CERTIFICATE" in cert.guarantee
  # the uniform objective lambda (psi_A - psi_B) grows lambda towards the boundary distance
  s = ddrs.optimize_sigma(
    getkey(), linear_fn, STEEP, x, sigma0=0.05, steps=100, lr=0.02, num_samples=16, family="uniform"
  )
  assert np.all(s > 0.1)
  with pytest.raises(ValueError, match="L2 balls"):
    ddrs.certify(
      getkey(),
      linear_fn,
      W,
      x,
      sigma=lam,
      num_classes=2,
      n=100,
      noise="uniform",
      memory=ddrs.MemoryCertifier(),
    )


def test_memory_batch_on_device_equals_one_by_one():
  rng = np.random.default_rng(1)
  b = 120
  x = rng.uniform(0, 1, (b, 5)).astype(np.float32)
  cls = rng.integers(-1, 3, b)
  rad = np.where(cls >= 0, rng.uniform(0, 0.8, b), 0.0)
  m1, m2 = ddrs.MemoryCertifier(), ddrs.MemoryCertifier()
  c1, r1 = m1.update_batch(x[:50], cls[:50], rad[:50])  # two batches: memory + batch distances
  c1b, r1b = m1.update_batch(x[50:], cls[50:], rad[50:])
  one = [m2.update(x[i], cls[i], rad[i]) for i in range(b)]
  np.testing.assert_array_equal(np.concatenate([c1, c1b]), [c for c, _ in one])
  np.testing.assert_array_equal(np.concatenate([r1, r1b]), [r for _, r in one])
  assert np.any(np.concatenate([c1, c1b]) != cls)  # both branches ran


def _ddrs_run(out, params):
  """A ``--method ddrs`` run of ``linear_fn`` with ``params`` on six toy inputs, and what it
  loads (``rsjax.app.launch.run``'s arguments)."""
  from rsjax import data
  from rsjax.app import launch
  from rsjax.records import spec as runspec
  from rsjax.runs import record, runner

  xs = _inputs([0.9, 0.1, 0.52, 0.95, 0.3, 0.7])
  ds = data.ArrayDataset(
    xs, (xs[:, 0] > 0.5).astype(np.int64), name="toy", split="test", num_classes=2
  )
  spec = runspec.RunSpec(
    model=runspec.ModelRef(fingerprint=runner.fingerprint(params)),
    data=runspec.DataRef(name="toy", split="test", size=len(ds), input_shape=(4,), num_classes=2),
    sigma=0.05,
    sampling=record.run_sampling(rsjax.Sampling(n0=32, n=500, alpha=0.01)),
    method="ddrs",
    options=dict(ddrs_steps=20, ddrs_lr=0.01, ddrs_draws=8, ddrs_memory="on"),
    seed=3,
    out=str(out),
  )
  return spec, launch.Loaded(None, {}, ds, linear_fn, params), xs


def test_a_ddrs_run_saves_sigma_resumes_and_applies_memory(tmp_path):
  # rsjax.app.launch.run of a RunSpec naming --method ddrs: the library's dataset run of DDRS.
  from rsjax.app import launch
  from rsjax.records import io

  out = tmp_path / "ddrs.tsv"
  spec, loaded, xs = _ddrs_run(out, W)
  kw = dict(execution=launch.Execution(batch_size=250, inputs_per_call=2, progress=False))
  get_batch, calls = loaded.dataset.get_batch, []

  def interrupted(idx):  # the run stops after two calls (4 rows written)
    calls.append(list(idx))
    if len(calls) > 2:
      raise KeyboardInterrupt
    return get_batch(idx)

  loaded.dataset.get_batch = interrupted
  with pytest.raises(KeyboardInterrupt):
    launch.run(spec, loaded, **kw)
  assert list(io.read_certify(out).idx) == [0, 1, 2, 3]
  loaded.dataset.get_batch = get_batch
  report = launch.run(spec, loaded, **kw)  # resumes: the memory replays the rows written
  assert report.written == 2 and report.selected == 6
  assert "memory-based" in report.guarantee
  final = io.read_certify(out)
  assert list(final.idx) == list(range(6))
  want = ddrs.optimize_sigma(
    jax.random.fold_in(launch.key(report.run), 2),
    linear_fn,
    W,
    xs,
    sigma0=0.05,
    steps=20,
    lr=0.01,
    num_samples=8,
    ids=np.arange(6),
  )
  np.testing.assert_allclose(final.extra["sigma"], want, rtol=1e-6)
  mc_predict, mc_radius = final.extra["predict_mc"].astype(np.int64), final.extra["radius_mc"]
  c, r = ddrs.MemoryCertifier().update_batch(xs, mc_predict, mc_radius)
  np.testing.assert_array_equal(final.predict, c)
  np.testing.assert_allclose(final.radius, np.where(c >= 0, r, 0.0))
  # an uninterrupted run writes the same rows
  whole = launch.run(_ddrs_run(tmp_path / "whole.tsv", W)[0], loaded, **kw)
  assert whole.written == 6
  np.testing.assert_array_equal(io.read_certify(tmp_path / "whole.tsv").radius, final.radius)
  # The run record names the model: rows of another model are never resumed.
  other, loaded2, _ = _ddrs_run(out, W * 2)
  with pytest.raises(io.RunMismatchError):
    launch.run(other, loaded2, **kw)


def test_optimized_sigma_is_a_sigma_source(getkey):
  # The IDRS designs' protocol: evaluate(x) -> SigmaValues; no rate bound (inf).
  x, key = _inputs(X0[:4]), getkey()
  ascent = ddrs.SigmaAscent(steps=5, lr=0.01, num_samples=4)
  values = ddrs.OptimizedSigma(key, linear_fn, W, 0.1, ascent).evaluate(x, ids=np.arange(4) + 7)
  want = ddrs.optimize_sigma(
    key, linear_fn, W, x, sigma0=0.1, steps=5, lr=0.01, num_samples=4, ids=np.arange(4) + 7
  )
  np.testing.assert_array_equal(values.sigma, want)
  assert values.rate == np.inf and values.slack.shape == (4,)
  with pytest.raises(ValueError, match="clip"):
    ddrs.SigmaAscent(clip=(0.9, 0.1))
