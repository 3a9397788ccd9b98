"""The registry of certify methods (rsjax.methods), shared by the library and the command."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rsjax
from rsjax import methods
from rsjax.app import cli
from rsjax.runs import runner
from rsjax.runs.method import Context


def _linear(params, x):
  return x.reshape(x.shape[0], -1) @ params


def _context(sigma=0.5, **kw):
  w = jnp.array([[1.0, -1.0], [0.5, -0.5]], jnp.float32)  # class 0 iff x0 + x1/2 > 0
  ds = types.SimpleNamespace(name="toy", num_classes=2, input_shape=(2,))
  return Context(
    key=jax.random.key(3),
    model=None,
    apply_fn=_linear,
    params=w,
    dataset=ds,
    sigma=sigma,
    settings=rsjax.Sampling(n0=50, n=2000, alpha=0.001, batch_size=500),
    **kw,
  )


def _x():
  return np.array([[1.0, 0.0], [-1.0, 0.2], [0.05, 0.0], [2.0, 1.0]], np.float32)


def test_cohen_entry_is_rsjax_certify():
  ctx = _context()
  certifier = methods.get("cohen").build(ctx)
  ids = np.array([4, 9, 2, 7])
  got = runner.certify_inputs(ctx, certifier, _x(), ids)
  want = rsjax.certify(
    ctx.key, _linear, ctx.params, _x(), sigma=0.5, num_classes=2, ids=ids, settings=ctx.settings
  )
  np.testing.assert_array_equal(got.counts, want.counts)
  np.testing.assert_array_equal(got.radius, want.radius)
  assert certifier == rsjax.Cohen() and certifier.columns == () and not certifier.sequential


def test_build_fills_defaults_and_rejects_unknown_options():
  with pytest.raises(ValueError, match="no option"):
    methods.get("ucan").build(_context(), ucan_patern="l1")
  assert methods.get("ucan").defaults()["ucan_pattern"] == "l2"


def test_ddrs_memory_keeps_balls_of_other_classes_apart_and_replays():
  ctx = _context()
  x, ids = _x(), np.arange(4)
  ddrs = methods.get("ddrs").build(ctx, ddrs_steps=5, ddrs_lr=0.01)
  cert = runner.certify_inputs(ctx, ddrs, x, ids)
  assert ddrs.sequential and cert.memory_used
  flat = x.astype(np.float64)
  for i in range(4):
    for j in range(i):
      if (
        min(cert.prediction[i], cert.prediction[j]) >= 0
        and cert.prediction[i] != cert.prediction[j]
      ):
        assert np.linalg.norm(flat[i] - flat[j]) >= cert.radius[i] + cert.radius[j]
  rows = [cert.row_fields(j) for j in range(4)]
  assert all(r["sound"] == 1 for r in rows)
  # A fresh certifier replays the rows written into its memory; other rows are refused.
  again = methods.get("ddrs").build(ctx, ddrs_steps=5, ddrs_lr=0.01)
  again.restore(x, cert.prediction, cert.radius)
  bad = methods.get("ddrs").build(ctx, ddrs_steps=5, ddrs_lr=0.01)
  bad.restore(x[:1], np.array([0]), np.array([5.0]))
  with pytest.raises(ValueError, match="replay"):
    bad.restore(x[1:2], np.array([1]), np.array([1.0]))
  off = methods.get("ddrs").build(ctx, ddrs_steps=5, ddrs_lr=0.01, ddrs_memory="off")
  cert_off = runner.certify_inputs(ctx, off, x, ids)
  assert "NOT A CERTIFICATE" in cert_off.guarantee
  assert all(cert_off.row_fields(j)["sound"] == 0 for j in range(4))
  np.testing.assert_array_equal(cert_off.radius, cert.radius_mc)


def test_the_command_takes_its_choices_from_the_registries():
  parser = cli.build_parser()
  certify = parser._subparsers._group_actions[0].choices["certify"]
  by_dest = {a.dest: a for a in certify._actions}
  assert list(by_dest["method"].choices) == [m.name for m in methods.available()]
  assert list(by_dest["noise"].choices) == list(rsjax.noise.NOISES)
  for method in methods.available():
    for o in method.options:
      assert by_dest[o.name].default == o.default
  args = parser.parse_args(["certify", "m", "o.tsv", "--method", "srs", "--deq-solver", "naive"])
  assert args.deq_solver == "iteration"


def test_every_method_has_the_one_call_shape():
  """``rsjax.certify(..., certifier=X)`` is the method's own certify, bit for bit."""
  w = jnp.array([[1.0, -1.0], [0.5, -0.5]], jnp.float32)
  x, ids = _x(), np.array([4, 9, 2, 7])
  key, kw = jax.random.key(5), dict(num_classes=2, n0=50, n=1000, alpha=0.001, ids=ids)
  design = rsjax.idrs.ConstantSigma(0.4)
  noise = rsjax.ucan.FrozenNoise(np.array([0.3, 0.5], np.float32))
  sig = np.array([0.3, 0.4, 0.5, 0.6])
  pairs = [
    (
      rsjax.certify(key, _linear, w, x, sigma=0.4, certifier=rsjax.Cohen(multiclass=True), **kw),
      rsjax.certify(key, _linear, w, x, sigma=0.4, multiclass=True, **kw),
    ),
    (
      rsjax.certify(key, _linear, w, x, sigma=None, certifier=rsjax.idrs.IDRS(design), **kw),
      rsjax.idrs.certify(key, _linear, w, x, design=design, **kw),
    ),
    (
      rsjax.certify(key, _linear, w, x, sigma=noise, certifier=rsjax.ucan.UCAN(), **kw),
      rsjax.ucan.certify(key, _linear, w, x, sigma=noise, **kw),
    ),
    (
      rsjax.certify(key, _linear, w, x, sigma=sig, certifier=rsjax.ddrs.DDRS(), **kw),
      rsjax.ddrs.certify(key, _linear, w, x, sigma=sig, **kw),
    ),
  ]
  for got, want in pairs:
    assert type(got) is type(want)
    np.testing.assert_array_equal(got.counts, want.counts)
    np.testing.assert_array_equal(got.prediction, want.prediction)
    np.testing.assert_array_equal(got.radius, want.radius)
  with pytest.raises(ValueError, match="design"):
    rsjax.certify(key, _linear, w, x, sigma=0.4, certifier=rsjax.idrs.IDRS(design), **kw)
  with pytest.raises(ValueError, match="Cohen"):
    rsjax.certify(key, _linear, w, x, sigma=0.4, certifier=rsjax.ddrs.DDRS(), multiclass=True, **kw)
