"""Tests of rsjax.models: architectures, normalization inside, the pure bridge."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rsjax import models

# (name, input_shape, num_classes, expected parameter count or (low, high)).
# ResNet-18 / ResNet-50 counts are the well-known torchvision / kuangliu values;
# LeNet-5 (padded conv1) is 61,706; the CIFAR ResNets are the ballpark of
# Cohen et al. (0.27M, 1.7M) plus the two 1x1 projection shortcuts.
ARCHS = [
  ("mlp", (8, 8, 1), 10, 64 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10),
  ("cnn", (28, 28, 1), 10, (1.1e6, 1.3e6)),
  ("lenet", (28, 28, 1), 10, 61_706),
  ("resnet20", (32, 32, 3), 10, (0.26e6, 0.28e6)),
  ("resnet110", (32, 32, 3), 10, (1.7e6, 1.75e6)),
  ("resnet18", (32, 32, 3), 10, 11_173_962),
  ("resnet50", (224, 224, 3), 1000, 25_557_032),
]


@functools.cache
def _abstract(name, input_shape, num_classes):
  """Model with abstract (shape-only) variables: nothing allocated; cached, never mutated."""
  return nnx.eval_shape(
    lambda: models.create_model(name, num_classes=num_classes, input_shape=input_shape, rngs=0)
  )


@pytest.mark.parametrize("name,input_shape,num_classes,expected", ARCHS, ids=[a[0] for a in ARCHS])
def test_param_counts(name, input_shape, num_classes, expected):
  n = models.count_params(_abstract(name, input_shape, num_classes))
  if isinstance(expected, tuple):
    assert expected[0] <= n <= expected[1], n
  else:
    assert n == expected


def test_torch_layout_options():
  """torchvision's ResNet-18 and the literature's MNIST LeNet (counts as in PyTorch)."""

  def count(name, input_shape, num_classes, **kw):
    return models.count_params(
      nnx.eval_shape(
        lambda: models.create_model(
          name, num_classes=num_classes, input_shape=input_shape, rngs=0, **kw
        )
      )
    )

  assert (
    count("imagenet_resnet", (224, 224, 3), 1000, block="basic", stage_sizes=(2, 2, 2, 2))
    == 11_689_512
  )
  assert (
    count("lenet", (28, 28, 1), 10, channels=(20, 50), hidden_sizes=(500,), padding=0) == 431_080
  )
  assert count("cifar_resnet", (32, 32, 3), 10, depth=20) == count("resnet20", (32, 32, 3), 10)


@pytest.mark.parametrize(
  "name,input_shape,num_classes,batch",
  [
    ("resnet110", (32, 32, 3), 10, 2),
    ("resnet18", (32, 32, 3), 10, 2),
    ("resnet50", (64, 64, 3), 7, 2),
    ("resnet50", (224, 224, 3), 1000, 1),
    ("lenet", (28, 28, 1), 10, 3),
    ("cnn", (8, 8, 1), 7, 3),
    ("mlp", (5,), 7, 3),
  ],
)
def test_output_shapes_abstract(name, input_shape, num_classes, batch):
  model = _abstract(name, input_shape, num_classes)
  apply_fn, variables = models.to_apply_fn(model)
  x = jax.ShapeDtypeStruct((batch, *input_shape), jnp.float32)
  out = jax.eval_shape(apply_fn, variables, x)
  assert out.shape == (batch, num_classes)
  assert out.dtype == jnp.float32


@pytest.mark.parametrize(
  "name,input_shape",
  [("mlp", (8, 8, 1)), ("cnn", (8, 8, 1)), ("lenet", (28, 28, 1)), ("resnet20", (32, 32, 3))],
)
def test_forward_real(name, input_shape, getkey):
  model = models.create_model(name, num_classes=10, input_shape=input_shape, rngs=0)
  apply_fn, variables = models.to_apply_fn(model)
  x = jax.random.uniform(getkey(), (2, *input_shape))
  logits = jax.jit(apply_fn)(variables, x)
  assert logits.shape == (2, 10)
  assert np.all(np.isfinite(np.asarray(logits)))


@pytest.fixture(scope="module")
def tiny_resnet():
  """A 2-stage basic-block ResNet with BatchNorm (the ResNet-20/110/18 code path), built once."""
  return models.BasicResNet(
    input_shape=(8, 8, 3),
    num_classes=5,
    stage_sizes=(1, 1),
    widths=(4, 8),
    normalize="cifar10",
    rngs=nnx.Rngs(0),
  )


@nnx.jit
def _nnx_forward(model, x):
  return model(x)


def _warm_batch_stats(model, key, steps=3):
  """Train-mode forwards (jitted) so BatchNorm running averages move off (0, 1)."""
  train_fn, params, rest = models.to_train_fn(model)
  step = jax.jit(train_fn)
  for i in range(steps):
    x = 2.0 * jax.random.uniform(jax.random.fold_in(key, i), (16, 8, 8, 3))
    _, rest = step(params, rest, x)
  nnx.update(model, rest)


def test_eval_apply_uses_running_averages(tiny_resnet, getkey):
  model = nnx.clone(tiny_resnet)
  _warm_batch_stats(model, getkey())
  x = jax.random.uniform(getkey(), (4, 8, 8, 3))
  apply_fn, variables = models.to_apply_fn(model)
  out = jax.jit(apply_fn)(variables, x)
  # Equals the NNX model's own eval forward, is deterministic, and differs
  # from the train-mode forward (batch statistics).
  eval_model = nnx.view(model, use_running_average=True)
  np.testing.assert_allclose(out, _nnx_forward(eval_model, x), rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(out, jax.jit(apply_fn)(variables, x))
  np.testing.assert_allclose(out, apply_fn(variables, x), rtol=1e-5, atol=1e-6)
  train_out = _nnx_forward(nnx.clone(model), x)
  assert np.max(np.abs(np.asarray(train_out - out))) > 1e-3
  # Eval mode: each input's logits do not depend on the rest of the batch.
  np.testing.assert_allclose(jax.jit(apply_fn)(variables, x[:1]), out[:1], rtol=1e-5, atol=1e-6)
  # to_apply_fn neither switched the model to eval mode nor moved its statistics.
  assert model.stem_bn.use_running_average is False
  stats = nnx.state(model, nnx.BatchStat)
  jax.jit(apply_fn)(variables, x)
  jax.tree.map(np.testing.assert_array_equal, stats, nnx.state(model, nnx.BatchStat))


def test_normalization_is_inside_the_model(tiny_resnet, getkey):
  mean, std = models.NORMALIZATION["cifar10"]
  with_norm = tiny_resnet
  without = nnx.clone(tiny_resnet)  # the same weights, no normalization layer
  without.normalize = None
  x = jax.random.uniform(getkey(), (3, 8, 8, 3))
  f1, v1 = models.to_apply_fn(with_norm)
  f0, v0 = models.to_apply_fn(without)
  manual = (x - jnp.asarray(mean)) / jnp.asarray(std)
  np.testing.assert_allclose(jax.jit(f1)(v1, x), jax.jit(f0)(v0, manual), rtol=1e-4, atol=1e-5)
  assert np.max(np.abs(np.asarray(jax.jit(f1)(v1, x) - jax.jit(f0)(v0, x)))) > 1e-3
  # The constants are not parameters (not trained, not in the state).
  assert all("normalize" not in str(path) for path, _ in nnx.to_flat_state(v1))


def test_default_normalizations():
  def stats(name, shape):
    m = _abstract(name, shape, 1000 if name == "resnet50" else 10)
    return (m.normalize.mean, m.normalize.std) if m.normalize is not None else None

  assert stats("resnet110", (32, 32, 3)) == ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))
  assert stats("resnet20", (32, 32, 3)) == models.NORMALIZATION["cifar10"]
  assert stats("resnet18", (32, 32, 3)) == models.NORMALIZATION["cifar10"]
  assert stats("resnet50", (224, 224, 3)) == ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
  assert stats("lenet", (28, 28, 1)) == ((0.1307,), (0.3081,))
  assert stats("mlp", (8, 8, 1)) is None
  m = nnx.eval_shape(
    lambda: models.create_model(
      "resnet20", num_classes=10, input_shape=(32, 32, 3), rngs=0, normalize=None
    )
  )
  assert m.normalize is None
  m = nnx.eval_shape(
    lambda: models.create_model(
      "lenet", num_classes=10, input_shape=(16, 16, 1), rngs=0, normalize=((0.5,), (0.25,))
    )
  )
  assert (m.normalize.mean, m.normalize.std) == ((0.5,), (0.25,))


def test_apply_fn_is_static_and_reused_without_retracing(tiny_resnet, getkey):
  model = tiny_resnet
  apply_fn, variables = models.to_apply_fn(model)
  apply_again, _ = models.to_apply_fn(model)
  assert hash(apply_fn) == hash(apply_again) and apply_fn == apply_again
  traces = []

  @jax.jit(static_argnums=0)
  def run(fn, variables, x):
    traces.append(1)
    return fn(variables, x)

  x = jax.random.uniform(getkey(), (2, 8, 8, 3))
  a = run(apply_fn, variables, x)
  b = run(apply_fn, variables, x + 0.1)
  c = run(apply_again, variables, x)
  assert len(traces) == 1
  np.testing.assert_array_equal(a, c)
  assert not np.array_equal(a, b)


def test_train_fn_updates_batch_stats_and_matches_eval_after_merge(tiny_resnet, getkey):
  model = nnx.clone(tiny_resnet)
  train_fn, params, rest = models.to_train_fn(model)
  x = jax.random.uniform(getkey(), (8, 8, 8, 3))
  y = jnp.arange(8) % 5

  def loss(params, rest):
    logits, new_rest = train_fn(params, rest, x)
    return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(8), y]), new_rest

  (l0, new_rest), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params, rest)
  assert np.isfinite(float(l0))
  assert jax.tree.structure(grads) == jax.tree.structure(params)
  assert any(float(jnp.abs(g).max()) > 0 for g in jax.tree.leaves(grads))
  moved = [
    not np.allclose(a, b)
    for a, b in zip(jax.tree.leaves(rest), jax.tree.leaves(new_rest), strict=True)
  ]
  assert any(moved)
  # Train-mode logits use batch statistics: equal to the NNX train forward.
  np.testing.assert_allclose(
    jax.jit(train_fn)(params, rest, x)[0], _nnx_forward(nnx.clone(model), x), rtol=1e-4, atol=1e-5
  )
  # Eval apply on merged (params, new_rest) equals the model updated in place.
  apply_fn, _ = models.to_apply_fn(model)
  merged = nnx.merge_state(params, new_rest)
  nnx.update(model, params, new_rest)
  apply2, variables2 = models.to_apply_fn(model)
  np.testing.assert_array_equal(jax.jit(apply_fn)(merged, x), jax.jit(apply2)(variables2, x))


def test_bfloat16_compute_dtype(getkey):
  model = models.create_model(
    "cnn", num_classes=3, input_shape=(8, 8, 1), rngs=0, dtype=jnp.bfloat16
  )
  apply_fn, variables = models.to_apply_fn(model)
  assert all(v.dtype == jnp.float32 for v in jax.tree.leaves(variables))
  out = apply_fn(variables, jax.random.uniform(getkey(), (2, 8, 8, 1)))
  assert out.dtype == jnp.bfloat16 and out.shape == (2, 3)


def test_errors():
  with pytest.raises(ValueError, match="Unknown model name 'resnet7'.*resnet110"):
    models.create_model("resnet7", num_classes=10, input_shape=(32, 32, 3), rngs=0)
  with pytest.raises(ValueError, match="at least 12x12"):
    models.create_model("lenet", num_classes=10, input_shape=(8, 8, 1), rngs=0)
  with pytest.raises(ValueError, match="depth"):
    models.CifarResNet(depth=21, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="normalize"):
    models.create_model("mlp", num_classes=2, input_shape=(4,), rngs=0, normalize="svhn")
  with pytest.raises(ValueError, match="channels"):
    models.create_model(
      "resnet20", num_classes=10, input_shape=(32, 32, 1), rngs=0, normalize="cifar10"
    )
  with pytest.raises(ValueError, match="num_classes"):
    models.create_model("mlp", num_classes=0, input_shape=(4,), rngs=0)


def _randomize_batch_norm(model, seed=0):
  from flax import nnx

  rng = np.random.default_rng(seed)
  for _, m in nnx.iter_graph(model):
    if isinstance(m, nnx.BatchNorm):
      c = m.scale.get_value().shape[0]
      m.mean.set_value(jnp.asarray(rng.normal(size=c) * 0.1, jnp.float32))
      m.var.set_value(jnp.asarray(rng.uniform(0.5, 2.0, size=c), jnp.float32))
      m.scale.set_value(jnp.asarray(rng.uniform(0.5, 1.5, size=c), jnp.float32))
      m.bias.set_value(jnp.asarray(rng.normal(size=c) * 0.1, jnp.float32))


@pytest.mark.parametrize(
  "name, shape, pairs",
  [("resnet20", (32, 32, 3), 1 + 9 * 2 + 2), ("resnet50", (32, 32, 3), 1 + 16 * 3 + 4)],
)
def test_fold_batch_norm_keeps_the_function(name, shape, pairs):
  from flax import nnx

  model = models.create_model(name, num_classes=10, input_shape=shape, rngs=0)
  _randomize_batch_norm(model)
  folded, count = models.fold_batch_norm(model)
  assert count == pairs  # every conv + BN pair (stem, blocks, projection shortcuts)
  assert not any(isinstance(m, nnx.BatchNorm) for _, m in nnx.iter_graph(folded))
  assert any(isinstance(m, nnx.BatchNorm) for _, m in nnx.iter_graph(model))  # original kept
  x = np.random.default_rng(1).uniform(size=(4,) + shape).astype(np.float32)
  f, v = models.to_apply_fn(model)
  g, w = models.to_apply_fn(folded)
  a, b = np.asarray(jax.jit(f)(v, x)), np.asarray(jax.jit(g)(w, x))
  # The same function up to float32 rounding (logits of order 1).
  np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4 * np.abs(a).max())
  assert np.abs(a).max() > 0.1


@pytest.mark.parametrize(
  "channels, pad, bias", [(1, 2, True), (2, 2, True), (3, 0, False), (4, 1, True)]
)
def test_few_channel_conv_is_the_convolution(channels, pad, bias, getkey):
  # LeNet's first convolution as multiply-adds: the convolution's values to float rounding.
  conv = nnx.Conv(
    channels, 6, (5, 5), padding=((pad, pad), (pad, pad)), use_bias=bias, rngs=nnx.Rngs(0)
  )
  if bias:
    conv.bias[...] = jax.random.normal(getkey(), conv.bias.shape)
  x = jax.random.uniform(getkey(), (3, 12, 11, channels))
  got = models.few_channel_conv(conv, x, pad=pad)
  want = conv(x)
  assert got.shape == want.shape == (3, 12 + 2 * pad - 4, 11 + 2 * pad - 4, 6)
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(jnp.max(jnp.abs(want))))
  assert not np.array_equal(np.asarray(got), np.zeros(got.shape))
