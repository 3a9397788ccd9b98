"""The declared precision reaches every model evaluation a certificate depends on,
also those outside the engine: DDRS's sigma ascent (its sigma is part of the
certificate) and objective, and the sigma sources of UCAN and IDRS.

On a GPU, JAX computes float32 matmuls and convolutions in TF32 unless a matmul
precision is in force while the program is traced; a DDRS sigma ascent traced
without it drifted by 3e-4 relative from the CPU's. These tests read the traced
programs on any backend: every ``dot_general`` / ``conv_general_dilated`` must
carry the declared precision (``"float32"``, the default: HIGHEST).
"""

import collections
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxpr_ops import OPS, matmul_eqns

import rsjax
from rsjax import data, ddrs, idrs, methods, ucan
from rsjax.app import launch
from rsjax.ddrs import _objective, _sigma
from rsjax.engine import precision as precision_lib
from rsjax.records import spec as runspec
from rsjax.runs import record, runner
from rsjax.runs.method import Context

PRECISIONS = [None, "float32", "tf32", "bfloat16"]


def ops(jaxpr):
  """``{(primitive, precision, lhs dtype): n}`` over a jaxpr and its sub-jaxprs."""
  return collections.Counter(
    (e.primitive.name, str(e.params.get("precision")), str(e.invars[0].aval.dtype))
    for e in matmul_eqns(jaxpr)
  )


def declared(precision):
  """The ``precision`` parameter of a dot traced inside ``rsjax.engine.precision.context``."""
  with precision_lib.context(precision):
    jaxpr = jax.make_jaxpr(jnp.dot)(jnp.ones((2, 2)), jnp.ones((2, 2)))
  (prec,) = {p for (_, p, _) in ops(jaxpr.jaxpr)}
  return prec


def test_the_default_declared_precision_is_highest():
  assert declared(None) == declared("float32") == str((jax.lax.Precision.HIGHEST,) * 2)
  assert declared("tf32") != declared("float32")


def conv_net(params, x):
  """A convolution and a dense layer: ``x [n, 4, 4, 1] -> logits [n, 3]``."""
  h = jax.lax.conv_general_dilated(
    x, params["k"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
  )
  return jnp.tanh(h).reshape(x.shape[0], -1) @ params["w"]


def _conv_params():
  rng = np.random.default_rng(0)
  return {
    "k": jnp.asarray(rng.normal(size=(3, 3, 1, 2)), jnp.float32),
    "w": jnp.asarray(rng.normal(size=(32, 3)) / 4, jnp.float32),
  }


def _recording(monkeypatch, module, name):
  """Replaces the jitted ``module.name`` by one that also keeps the jaxpr it traces."""
  jitted, seen = getattr(module, name), []

  def call(*args, **kwargs):
    seen.append(jitted.trace(*args, **kwargs).jaxpr.jaxpr)
    return jitted(*args, **kwargs)

  monkeypatch.setattr(module, name, call)
  return seen


def _assert_declared(jaxprs, precision):
  assert jaxprs
  dtype = "bfloat16" if precision == "bfloat16" else "float32"
  for jaxpr in jaxprs:
    found = ops(jaxpr)
    assert {p for (p, _, _) in found} == set(OPS)  # the convolution, the dense layer
    assert {(prec, dt) for (_, prec, dt) in found} == {(declared(precision), dtype)}, found


@pytest.mark.parametrize("precision", PRECISIONS)
def test_ddrs_sigma_ascent_runs_at_the_declared_precision(monkeypatch, precision):
  seen = _recording(monkeypatch, _sigma, "_optimize")
  x = np.random.default_rng(1).uniform(size=(2, 4, 4, 1)).astype(np.float32)
  kw = {} if precision is None else {"precision": precision}
  sig = ddrs.optimize_sigma(0, conv_net, _conv_params(), x, sigma0=0.3, steps=2, lr=0.01, **kw)
  assert sig.shape == (2,) and np.all(np.isfinite(sig))
  _assert_declared(seen, precision)  # forward and gradient, every step


@pytest.mark.parametrize("precision", PRECISIONS)
def test_ddrs_objective_runs_at_the_declared_precision(monkeypatch, precision):
  seen = _recording(monkeypatch, _objective, "_evaluate")
  x = np.random.default_rng(2).uniform(size=(2, 4, 4, 1)).astype(np.float32)
  kw = {} if precision is None else {"precision": precision}
  r = ddrs.smoothing_objective(0, conv_net, _conv_params(), x, sigma=0.3, num_samples=4, **kw)
  assert r.shape == (2,)
  _assert_declared(seen, precision)


def _matmul_seen():
  """A linear classifier that records the matmul precision in force when traced."""
  seen = []

  def apply_fn(params, x):
    seen.append(jax.config.jax_default_matmul_precision)
    return x.reshape(x.shape[0], -1) @ params.astype(x.dtype)

  return apply_fn, seen


W = jnp.array([[1.0, -1.0], [0.5, -0.5]], jnp.float32)
X = np.array([[1.0, 0.0], [-1.0, 0.2], [0.05, 0.0], [2.0, 1.0]], np.float32)
SMALL = dict(n0=20, n=200, alpha=0.01, batch_size=100)


@pytest.mark.parametrize("precision, matmul", [("float32", "highest"), ("tf32", "tensorfloat32")])
def test_ddrs_runs_pass_their_precision_to_the_ascent(tmp_path, precision, matmul):
  # --method ddrs (the plan, and a run of it through rsjax.app.launch.run): ascent and CERTIFY alike.
  apply_fn, seen = _matmul_seen()
  ctx = Context(
    key=jax.random.key(3),
    model=None,
    apply_fn=apply_fn,
    params=W,
    dataset=types.SimpleNamespace(name="toy", num_classes=2, input_shape=(2,)),
    sigma=0.5,
    settings=rsjax.Sampling(precision=precision, **SMALL),
  )
  ddrs = methods.get("ddrs").build(ctx, ddrs_steps=2, ddrs_lr=0.01)
  runner.certify_inputs(ctx, ddrs, X, np.arange(4))
  n_plan = len(seen)
  apply_fn, seen2 = _matmul_seen()
  ds = data.ArrayDataset(X, np.zeros(4, np.int64), name="toy", split="test", num_classes=2)
  spec = runspec.RunSpec(
    model=runspec.ModelRef(fingerprint="toy"),
    data=runspec.DataRef(name="toy", split="test", size=4, input_shape=(2,), num_classes=2),
    sigma=0.5,
    sampling=record.run_sampling(rsjax.Sampling(precision=precision, **SMALL)),
    method="ddrs",
    options=dict(ddrs_steps=2, ddrs_lr=0.01, ddrs_draws=1, ddrs_memory="on"),
    out=str(tmp_path / "d.tsv"),
  )
  loaded = launch.Loaded(None, {}, ds, apply_fn, W)
  launch.run(
    spec, loaded, execution=launch.Execution(batch_size=SMALL["batch_size"], progress=False)
  )
  assert n_plan and seen2 and set(seen + seen2) == {matmul}


class _Recorded:
  """A sigma source that records the matmul precision in force when evaluated."""

  def __init__(self, source):
    self.source, self.seen = source, []

  def evaluate(self, x):
    self.seen.append(jax.config.jax_default_matmul_precision)
    return self.source.evaluate(x)


@pytest.mark.parametrize("precision, matmul", [(None, "highest"), ("tf32", "tensorfloat32")])
def test_sigma_sources_are_evaluated_at_the_declared_precision(precision, matmul):
  # UCAN's input-dependent generator and an IDRS design may run a network.
  kw = dict(num_classes=2, **SMALL)
  if precision is not None:
    kw["precision"] = precision
  generator = _Recorded(ucan.InputDependentNoise(lambda x: (None, np.full(x.shape, 0.5))))
  rsjax.certify(0, _linear, W, X, sigma=generator, certifier=ucan.UCAN(allow_unsound=True), **kw)
  design = _Recorded(idrs.ConstantSigma(0.5))
  rsjax.certify(0, _linear, W, X, certifier=idrs.IDRS(design), **kw)
  assert generator.seen == design.seen == [matmul]


def _linear(params, x):
  return x.reshape(x.shape[0], -1) @ params
