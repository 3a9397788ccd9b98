"""Narrow-stage packing (``rsjax.models.pack_narrow_stage``, ``--pack``): the same classifier.

The packed model runs the stem and the blocks of fewer than 32 channels on ``g``
samples side by side in the channel axis with block-diagonal kernels. Each
output channel sums the same products plus exact zeros, in another order, so:

* float32 at full precision: logits equal to the unpacked model's within
  ``F32_TOL`` of the largest logit (measured: at most 6e-7 on these models);
* bfloat16 (the engine's cast): within the repo's bf16 bound, 10% of the
  largest float32 logit (``tests/test_denoise_bf16.py``; measured: 0 on the CPU);
* counts (``rsjax.sample_counts``, ``rsjax.certify``): equal, the golden
  contract's integers.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import rsjax
from rsjax import models, verify
from rsjax.app import audit, cli
from rsjax.engine.step import cast_floating, make_chunk_plan, step_counts
from rsjax.noise import GAUSSIAN
from rsjax.records.spec import RunSpec

#: float32 logits of the packed and unpacked models agree to this, relative to the largest.
F32_TOL = 1e-5
#: the bf16 bound of the repo: a logit within 10% of the largest float32 logit.
BF16_TOL = 0.1
SHAPE = (8, 8, 3)


def _randomize_batch_norm(model, seed=0):
  """Batch norm statistics away from the identity, so that tiling them is tested."""
  rng = np.random.default_rng(seed)
  for _, m in nnx.iter_graph(model):
    if isinstance(m, nnx.BatchNorm):
      c = m.num_features
      m.mean.set_value(jnp.asarray(rng.normal(size=c) * 0.1, jnp.float32))
      m.var.set_value(jnp.asarray(rng.uniform(0.5, 1.5, size=c), jnp.float32))
      m.scale.set_value(jnp.asarray(rng.uniform(0.5, 1.5, size=c), jnp.float32))
      m.bias.set_value(jnp.asarray(rng.normal(size=c) * 0.1, jnp.float32))
  return model


def _resnet20(num_classes=3):
  model = models.create_model("resnet20", num_classes=num_classes, input_shape=SHAPE, rngs=0)
  return _randomize_batch_norm(model)


def _two_narrow_stages():
  """8 and 16 channels: the narrow part spans a stride-2 block with its projection."""
  model = models.BasicResNet(
    input_shape=SHAPE, num_classes=3, stage_sizes=(1, 1, 1), widths=(8, 16, 32), rngs=nnx.Rngs(1)
  )
  return _randomize_batch_norm(model, seed=1)


def _logits(model, x, dtype=None):
  f, v = models.to_apply_fn(model)

  def run(v, x):
    return f(cast_floating(v, dtype), x if dtype is None else x.astype(dtype))

  with jax.default_matmul_precision("highest"):
    return np.asarray(jax.jit(run)(v, x).astype(jnp.float32))


def _x(b, seed=2):
  return np.random.default_rng(seed).uniform(size=(b,) + SHAPE).astype(np.float32)


@pytest.mark.parametrize("g", [2, 4])
@pytest.mark.parametrize("fold", [False, True])
def test_packed_logits_equal_the_unpacked_in_float32(g, fold):
  model = _resnet20()
  if fold:
    model = models.fold_batch_norm(model)[0]
  packed = models.pack_narrow_stage(model, g)
  assert isinstance(packed, models.PackedResNet) and len(packed.narrow) == 3
  x = _x(7)  # not a multiple of g: padded inside the call, the padding's logits sliced off
  a, b = _logits(model, x), _logits(packed, x)
  assert b.shape == a.shape == (7, 3)
  np.testing.assert_allclose(b, a, rtol=0, atol=F32_TOL * np.abs(a).max())
  assert np.abs(a).max() > 0.1


def test_the_narrow_part_may_span_a_projection_block():
  model = _two_narrow_stages()
  packed = models.pack_narrow_stage(model, 2)
  assert len(packed.narrow) == 2 and packed.narrow[1].proj_conv.in_features == 16
  x = _x(5)
  a, b = _logits(model, x), _logits(packed, x)
  np.testing.assert_allclose(b, a, rtol=0, atol=F32_TOL * np.abs(a).max())


def test_folding_after_packing_is_folding_before():
  model = _resnet20()
  packed_then_folded, pairs = models.fold_batch_norm(models.pack_narrow_stage(model, 2))
  assert pairs == 1 + 9 * 2 + 2
  folded_then_packed = models.pack_narrow_stage(models.fold_batch_norm(model)[0], 2)
  x = _x(4)
  a, b = _logits(packed_then_folded, x), _logits(folded_then_packed, x)
  np.testing.assert_allclose(b, a, rtol=0, atol=F32_TOL * np.abs(a).max())


@pytest.mark.parametrize("g", [2, 4])
def test_packed_bfloat16_logits_keep_the_bf16_bound(g):
  model = _resnet20()
  x = _x(6)
  f32 = _logits(model, x)
  packed = models.pack_narrow_stage(model, g)
  a, b = _logits(model, x, jnp.bfloat16), _logits(packed, x, jnp.bfloat16)
  assert np.abs(b - a).max() <= BF16_TOL * np.abs(f32).max()


@pytest.mark.parametrize("g", [2, 4])
def test_counts_and_certificates_are_the_unpacked_ones(g):
  model = _resnet20()
  x = _x(3, seed=3)
  f, v = models.to_apply_fn(model)
  pf, pv = models.to_apply_fn(models.pack_narrow_stage(model, g))
  # batch 30: not a multiple of 4, and the selection pass puts several inputs in a step.
  kw = dict(sigma=0.25, num_classes=3, num=60, batch_size=30)
  a = rsjax.sample_counts(5, f, v, x, **kw)
  b = rsjax.sample_counts(5, pf, pv, x, **kw)
  np.testing.assert_array_equal(b, a)
  assert len(np.flatnonzero(a.sum(axis=0))) > 1  # not a constant classifier
  kw = dict(sigma=0.25, num_classes=3, n0=20, n=90, alpha=0.01, batch_size=30)
  c, d = rsjax.certify(7, f, v, x, **kw), rsjax.certify(7, pf, pv, x, **kw)
  np.testing.assert_array_equal(d.prediction, c.prediction)
  np.testing.assert_array_equal(d.counts, c.counts)
  np.testing.assert_array_equal(d.radius, c.radius)


def test_a_non_finite_sample_still_refuses_the_call():
  model = _resnet20()
  x = _x(3)
  x[1] = 1e38  # finite, but the normalized input overflows: that input's logits are NaN
  for m in (model, models.pack_narrow_stage(model, 2)):
    f, v = models.to_apply_fn(m)
    with pytest.raises(FloatingPointError, match=r"ids \[1\]"):
      rsjax.sample_counts(0, f, v, x, sigma=0.25, num_classes=3, num=8, batch_size=8)


def test_models_without_a_provable_narrow_stage_are_refused():
  lenet = models.create_model("lenet", num_classes=10, input_shape=(28, 28, 1), rngs=0)
  with pytest.raises(ValueError, match="cannot pack LeNet: only rsjax's ResNets"):
    models.pack_narrow_stage(lenet, 2)
  wide = models.create_model("resnet18", num_classes=10, input_shape=SHAPE, rngs=0)
  with pytest.raises(ValueError, match="cannot pack ResNet18: it has no stage with fewer than 32"):
    models.pack_narrow_stage(wide, 4)
  model = _resnet20()
  for g in (0, 3.0, True, "2"):
    with pytest.raises(ValueError, match="g must be a positive integer"):
      models.pack_narrow_stage(model, g)
  assert models.pack_narrow_stage(lenet, 1) is lenet  # 1: packing off, any model


def _computations(hlo: str) -> dict[str, list[str]]:
  """``{computation name: its instruction lines}`` of an HLO module's text."""
  out, name = {}, None
  for line in hlo.splitlines():
    if line and not line[0].isspace() and line.rstrip().endswith("{"):
      name = "ENTRY" if line.startswith("ENTRY") else line.split()[0]
      out[name] = []
    elif line.startswith("}"):
      name = None
    elif name is not None:
      out[name].append(line.strip())
  return out


@pytest.mark.parametrize("dtype", [None, jnp.bfloat16])
def test_the_packing_transpose_rides_in_the_pass_that_reads_the_noisy_batch(dtype):
  # The engine's own step, compiled for the CPU: the input's permutation into the packed
  # layout is no pass of its own but part of the fusion that normalizes the noisy batch.
  f, v = models.to_apply_fn(models.pack_narrow_stage(_resnet20(), 2))
  plan = make_chunk_plan(1, 8, 8, 1)

  def step(key, params, x, sigma):
    params = cast_floating(params, dtype)
    ids = jnp.zeros((1,), jnp.uint32)
    return step_counts(f, params, GAUSSIAN, 3, plan, key, x, sigma, ids, jnp.uint32(0), dtype)

  args = (jax.random.key(0), v, jnp.zeros((1,) + SHAPE), jnp.ones((1, 1, 1, 1)))
  hlo = jax.jit(step).lower(*args).compile().as_text()
  where = [
    (name, body)
    for name, body in _computations(hlo).items()
    if any("transpose(" in ln and "dimensions={0,2,3,1,4}" in ln for ln in body)
  ]
  assert len(where) == 1, [n for n, _ in where]
  name, body = where[0]
  assert name != "ENTRY" and "fused" in name
  ops = " ".join(body)
  assert "parameter(" in ops and "multiply(" in ops  # the normalization's (x - mean) / std


def _tiny_model_dir(tmp_path):
  d = tmp_path / "resnet20"
  model = models.create_model(
    "resnet20", num_classes=10, input_shape=(8, 8, 1), normalize="digits", rngs=0
  )
  config = {
    "model": "resnet20",
    "num_classes": 10,
    "input_shape": [8, 8, 1],
    "dataset": "digits",
    "model_kwargs": {"normalize": "digits"},
  }
  models.save_model(str(d), _randomize_batch_norm(model), config)
  return d


@pytest.mark.heavy
def test_cli_pack_is_in_the_record_and_audit_rebuilds_it(tmp_path, capsys):
  d = _tiny_model_dir(tmp_path)
  common = ["--sigma", "0.25", "--N", "60", "--N0", "20", "--max", "3", "--batch", "30", "--quiet"]
  plain, packed = tmp_path / "plain.tsv", tmp_path / "packed.tsv"
  assert cli.main(["certify", str(d), str(plain), *common]) == 0
  assert cli.main(["certify", str(d), str(packed), *common, "--pack", "2"]) == 0
  assert "pack: 2" in capsys.readouterr().out
  assert "pack" not in RunSpec.read(plain).sampling.to_json()  # unpacked records as before
  assert RunSpec.read(packed).sampling.pack == 2
  # The packed run is another claim, so its key differs from the plain run's: the unpacked
  # model certified with the packed run's key gives the same predictions and radii.
  import dataclasses

  import numpy as np

  import rsjax
  from rsjax.app import launch
  from rsjax.records import io

  run = RunSpec.read(packed)
  unpacked = dataclasses.replace(run, sampling=dataclasses.replace(run.sampling, pack=1))
  loaded = launch.load(unpacked, model_dir=str(d))
  res = io.read_certify(packed)
  x = np.asarray(loaded.dataset.get_batch(res.idx)[0])
  cert = rsjax.certify(
    launch.key(run),
    loaded.apply_fn,
    loaded.params,
    x,
    sigma=run.sigma,
    num_classes=run.data.num_classes,
    settings=launch.settings(run, 30),
    ids=res.idx,
  )
  np.testing.assert_array_equal(cert.prediction, res.predict)
  np.testing.assert_allclose(cert.radius, res.radius, rtol=1e-12)
  assert verify.verify(str(packed)).ok
  report = audit.audit(packed, model_dir=d, rows="all", seed=0)
  assert report.ok, report.summary()
  # A resume without --pack is another run: refused.
  assert cli.main(["certify", str(d), str(packed), *common]) != 0
  rec = json.loads((tmp_path / "packed.tsv.run.json").read_text())
  assert rec["sampling"]["pack"] == 2


def test_cli_pack_refuses_a_model_it_cannot_pack(tmp_path, capsys):
  d = tmp_path / "mlp"
  model = models.create_model("mlp", num_classes=10, input_shape=(8, 8, 1), rngs=0)
  config = {"model": "mlp", "num_classes": 10, "input_shape": [8, 8, 1], "dataset": "digits"}
  models.save_model(str(d), model, config)
  out = str(tmp_path / "o.tsv")
  argv = ["certify", str(d), out, "--sigma", "0.25", "--N", "200", "--pack", "4"]
  assert cli.main(argv) != 0
  assert "--pack 4: pack_narrow_stage cannot pack MLP" in capsys.readouterr().err


def test_the_gpu_suite_packs_where_it_can_and_records_it():
  from benchmarks import measure as suite_rows
  from rsjax.app.bench import costs

  said = []
  row = suite_rows.row_model("resnet20", "fp32", num=10, batch_size=10, pack=2, log=said.append)
  assert row.pack == 2 and isinstance(row.model, models.ResNet20)  # the twin's model: as built
  plain = suite_rows.row_model("resnet20", "fp32", num=10, batch_size=10)
  # Per sample, traced on one packed row: stage 1's 3x3 convolutions cost g times more.
  packed_flops = costs.matmul_flops(row.apply_fn, row.variables, (32, 32, 3), batch=2)
  plain_flops = costs.matmul_flops(plain.apply_fn, plain.variables, (32, 32, 3))
  stage1 = 2 * 32 * 32 * (3 * 9 * 16 + 6 * 16 * 9 * 16)  # the stem and six 16-channel convs
  assert packed_flops - plain_flops == stage1
  mlp = suite_rows.row_model("mlp", "fp32", num=10, batch_size=10, pack=2, log=said.append)
  assert mlp.pack == 1 and "mlp runs unpacked" in said[-1]
