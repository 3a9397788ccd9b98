"""Tests of rsjax.training: Gaussian-noise training, checkpoints and exact resume."""

import dataclasses
import json
import math

import jax
import numpy as np
import pytest
from flax import nnx

from rsjax import models, training
from rsjax.models import to_apply_fn
from rsjax.models.checkpoint import Checkpoints


class TinyNet(nnx.Module):
  """MLP with BatchNorm and Dropout, so train/eval modes and RNG state matter."""

  def __init__(self, *, input_shape, num_classes, rngs, hidden=32):
    din = math.prod(input_shape)
    self.l1 = nnx.Linear(din, hidden, rngs=rngs)
    self.bn = nnx.BatchNorm(hidden, rngs=rngs)
    self.drop = nnx.Dropout(0.1, rngs=rngs)
    self.l2 = nnx.Linear(hidden, num_classes, rngs=rngs)

  def __call__(self, x):
    x = x.reshape(x.shape[0], -1)
    return self.l2(self.drop(nnx.relu(self.bn(self.l1(x)))))


def tiny_create(name, *, num_classes, input_shape, rngs, **kwargs):
  assert name == "tiny"
  if not isinstance(rngs, nnx.Rngs):
    rngs = nnx.Rngs(rngs)
  return TinyNet(input_shape=input_shape, num_classes=num_classes, rngs=rngs, **kwargs)


@pytest.fixture(scope="module")
def digits():
  from sklearn.datasets import load_digits

  d = load_digits()
  x = (d.images / 16.0).astype(np.float32)[..., None]  # [N, 8, 8, 1] in [0, 1]
  y = d.target.astype(np.int32)
  rng = np.random.default_rng(0)
  p = rng.permutation(len(y))
  x, y = x[p], y[p]
  return (x[:1200], y[:1200]), (x[1200:], y[1200:])


_CONFIG_FIELDS = {f.name for f in dataclasses.fields(training.TrainConfig)}


def _train(key, model, data, **kw):
  """``training.train`` with the TrainConfig fields given as keywords."""
  cfg = training.TrainConfig(**{k: v for k, v in kw.items() if k in _CONFIG_FIELDS})
  return training.train(
    key, model, data, cfg, **{k: v for k, v in kw.items() if k not in _CONFIG_FIELDS}
  )


def _accuracy(model, x, y):
  apply_fn, variables = to_apply_fn(model)
  return float(np.mean(np.argmax(np.asarray(apply_fn(variables, x)), -1) == y))


def test_training_improves_accuracy(digits, tmp_path):
  (xt, yt), (xe, ye) = digits
  model = TinyNet(input_shape=(8, 8, 1), num_classes=10, rngs=nnx.Rngs(0))
  before = _accuracy(model, xe, ye)
  seen = []
  model, hist = _train(
    jax.random.key(0),
    model,
    (xt, yt),
    sigma=0.25,
    epochs=3,
    batch_size=64,
    lr=0.1,
    lr_step=2,
    eval_data=(xe, ye),
    eval_batch_size=64,
    workdir=tmp_path,
    progress=False,
    on_epoch_end=seen.append,
    model_config={"model": "tiny", "num_classes": 10, "input_shape": [8, 8, 1]},
  )
  assert [h["epoch"] for h in hist] == [1, 2, 3] and seen == hist
  np.testing.assert_allclose([h["lr"] for h in hist], [0.1, 0.1, 0.01])
  assert before < 0.3
  assert hist[-1]["clean_acc"] > 0.85, hist
  assert hist[-1]["noisy_acc"] > 0.7, hist
  assert hist[-1]["train_loss"] < hist[0]["train_loss"]
  # the per-epoch clean accuracy is the eval-mode accuracy of the returned model
  assert _accuracy(model, xe, ye) == pytest.approx(hist[-1]["clean_acc"], abs=1e-9)
  # workdir contents, and loading the model back
  cfg = json.loads((tmp_path / "config.json").read_text())
  assert cfg["model"] == "tiny" and cfg["sigma"] == 0.25 and cfg["train"]["batch_size"] == 64
  assert json.loads((tmp_path / "history.json").read_text()) == hist
  loaded, cfg2 = models.load_model(tmp_path, create_fn=tiny_create, rngs=123)
  assert cfg2 == cfg
  assert _accuracy(loaded, xe, ye) == _accuracy(model, xe, ye)
  assert Checkpoints(tmp_path / "checkpoints").all_steps() == [2, 3]
  # an older epoch can be loaded too, and it is a different model
  old, _ = models.load_model(tmp_path, create_fn=tiny_create, step=2)
  w_old = np.asarray(nnx.state(old, nnx.Param)["l1"]["kernel"][...])
  w_new = np.asarray(nnx.state(model, nnx.Param)["l1"]["kernel"][...])
  assert not np.array_equal(w_old, w_new)


def test_noise_is_added_per_step(digits):
  """With a huge sigma the noisy training batches are at chance level."""
  (xt, yt), _ = digits
  model = TinyNet(input_shape=(8, 8, 1), num_classes=10, rngs=nnx.Rngs(0))
  _, hist = _train(
    jax.random.key(1),
    model,
    (xt, yt),
    sigma=20.0,
    epochs=1,
    batch_size=64,
    lr=0.1,
    lr_step=2,
    progress=False,
  )
  assert hist[0]["train_acc"] < 0.25 and hist[0]["clean_acc"] is None


def _state_leaves(model):
  state = nnx.state(model)
  out = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(state):
    if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
      leaf = jax.random.key_data(leaf)
    out[jax.tree_util.keystr(path)] = np.asarray(leaf)
  return out


def test_resume_is_exact(digits, tmp_path):
  (xt, yt), (xe, ye) = digits
  data = (xt, yt)  # 1200 = 18 * 64 + 48: a partial last batch
  kw = dict(
    sigma=0.5,
    batch_size=64,
    lr=0.1,
    lr_step=1,
    eval_data=(xe[:100], ye[:100]),
    eval_batch_size=64,
    progress=False,
  )
  full, hist_full = _train(
    jax.random.key(7),
    TinyNet(input_shape=(8, 8, 1), num_classes=10, rngs=nnx.Rngs(3)),
    data,
    epochs=2,
    workdir=tmp_path / "a",
    **kw,
  )
  # run 1 epoch, "kill", restart the same command with 2 epochs on a fresh model object
  _train(
    jax.random.key(7),
    TinyNet(input_shape=(8, 8, 1), num_classes=10, rngs=nnx.Rngs(3)),
    data,
    epochs=1,
    workdir=tmp_path / "b",
    **kw,
  )
  fresh = TinyNet(input_shape=(8, 8, 1), num_classes=10, rngs=nnx.Rngs(3))
  resumed, hist_res = _train(jax.random.key(7), fresh, data, epochs=2, workdir=tmp_path / "b", **kw)
  a, b = _state_leaves(full), _state_leaves(resumed)
  assert a.keys() == b.keys()
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  strip = lambda h: [{k: v for k, v in e.items() if k != "seconds"} for e in h]  # noqa: E731
  assert strip(hist_full) == strip(hist_res)
  # the second epoch changed the weights (so equality above is not vacuous)
  one, _ = models.restore_model(
    tmp_path / "b", TinyNet(input_shape=(8, 8, 1), num_classes=10, rngs=nnx.Rngs(3)), step=1
  )
  assert not np.array_equal(
    _state_leaves(one)["['l1']['kernel'].value"], a["['l1']['kernel'].value"]
  )
  with Checkpoints(tmp_path / "b" / "checkpoints") as ck:
    assert ck.all_steps() == [1, 2]
  # resuming a finished run trains nothing and returns the same weights
  again, hist_again = _train(
    jax.random.key(7),
    TinyNet(input_shape=(8, 8, 1), num_classes=10, rngs=nnx.Rngs(3)),
    data,
    epochs=2,
    workdir=tmp_path / "b",
    **kw,
  )
  c = _state_leaves(again)
  for k in a:
    np.testing.assert_array_equal(a[k], c[k], err_msg=k)
  assert hist_again == hist_res


def test_resume_checks(digits, tmp_path):
  (xt, yt), _ = digits
  data = (xt, yt)
  kw = dict(sigma=0.25, batch_size=64, lr=0.1, lr_step=2, progress=False)
  make = lambda: TinyNet(input_shape=(8, 8, 1), num_classes=10, rngs=nnx.Rngs(0))  # noqa: E731
  _train(jax.random.key(0), make(), data, epochs=1, workdir=tmp_path, **kw)
  with pytest.raises(ValueError, match="resume=True"):
    _train(jax.random.key(0), make(), data, epochs=2, workdir=tmp_path, resume=False, **kw)
  with pytest.raises(ValueError, match="sigma"):
    _train(jax.random.key(0), make(), data, epochs=2, workdir=tmp_path, **{**kw, "sigma": 0.5})
  with pytest.raises(ValueError, match="key"):
    _train(jax.random.key(1), make(), data, epochs=2, workdir=tmp_path, **kw)
  with pytest.raises(ValueError, match="num_train"):
    _train(jax.random.key(0), make(), (xt[:1000], yt[:1000]), epochs=2, workdir=tmp_path, **kw)


def test_bad_arguments(digits):
  (xt, yt), _ = digits
  make = lambda: TinyNet(input_shape=(8, 8, 1), num_classes=10, rngs=nnx.Rngs(0))  # noqa: E731
  key = jax.random.key(0)
  with pytest.raises(ValueError, match="sigma"):
    _train(key, make(), (xt, yt), sigma=-1.0, progress=False)
  with pytest.raises(ValueError, match=r"\[0, 1\]"):
    _train(key, make(), (xt * 255, yt), sigma=0.25, progress=False)
  with pytest.raises(ValueError, match="label"):
    _train(key, make(), (xt, yt + 10), sigma=0.25, progress=False)
  with pytest.raises(ValueError, match="batch_size"):
    _train(key, make(), (xt, yt), sigma=0.25, batch_size=0, progress=False)
  with pytest.raises(ValueError, match="y must be integer"):
    _train(key, make(), (xt, yt.astype(float)), sigma=0.25, progress=False)


def test_optimizer_matches_torch_sgd_step():
  """One update of the optax chain equals torch SGD(momentum, weight_decay) by hand."""
  cfg = training.TrainConfig(
    sigma=0.0, lr=0.1, momentum=0.9, weight_decay=1e-2, lr_step=1, gamma=0.5
  )
  tx = training.make_optimizer(cfg, steps_per_epoch=2)
  p = {"w": np.array([1.0, -2.0], np.float32)}
  g = {"w": np.array([0.5, 0.25], np.float32)}
  state = tx.init(p)
  buf = np.zeros(2)
  pt = p["w"].astype(np.float64)
  for step in range(4):
    lr = 0.1 * 0.5 ** (step // 2)
    d = g["w"] + 1e-2 * pt
    buf = 0.9 * buf + d
    pt = pt - lr * buf
    upd, state = tx.update(g, state, p)
    p = {"w": np.asarray(p["w"] + upd["w"])}
    np.testing.assert_allclose(p["w"], pt, rtol=1e-6)


@pytest.mark.heavy
def test_strategies_discard_reweigh_attack_and_resume(digits, tmp_path):
  """Sun et al.'s three strategies together: the discard keeps exactly p_A >= p_t, the
  sampling weights survive a restart, and a resumed run equals an uninterrupted one."""
  (xt, yt), _ = digits
  data = (xt[:400], yt[:400])
  kw = dict(
    sigma=0.5,
    batch_size=64,
    lr=0.1,
    lr_step=5,
    progress=False,
    objective=training.Gaussian(
      num_noise=2, attack=training.SphereAttack(steps=2, step_size=0.5, start_epoch=1)
    ),
    discard=training.Discard(epoch=1, threshold=0.5, num_noise=20),
    reweigh=training.Reweigh(epoch=1, every=1),
  )
  make = lambda: TinyNet(input_shape=(8, 8, 1), num_classes=10, rngs=nnx.Rngs(3))  # noqa: E731
  full, hist = _train(jax.random.key(5), make(), data, epochs=3, workdir=tmp_path / "a", **kw)
  assert "kept_fraction" in hist[0] and hist[0]["kept_fraction"] == 1.0
  # the discard at the start of epoch 2 (index 1) used the epoch-1 model and the documented key
  _train(jax.random.key(5), make(), data, epochs=1, workdir=tmp_path / "b", **kw)
  m1, _ = models.restore_model(tmp_path / "b", make(), step=1)
  apply_fn, variables = to_apply_fn(m1)
  count_key = jax.random.fold_in(jax.random.fold_in(jax.random.key(5), 3), 1)
  counts = training.correct_counts(
    jax.random.fold_in(count_key, 0),
    apply_fn,
    variables,
    data[0],
    data[1],
    sigma=0.5,
    num=20,
    num_classes=10,
    ids=np.arange(400),
  )
  kept = training.discard_mask(counts, 20, 0.5)
  assert 0 < kept.mean() < 1
  assert hist[1]["kept_fraction"] == pytest.approx(kept.mean())
  assert hist[2]["kept_fraction"] == hist[1]["kept_fraction"]
  resumed, hist_b = _train(jax.random.key(5), make(), data, epochs=3, workdir=tmp_path / "b", **kw)
  a, b = _state_leaves(full), _state_leaves(resumed)
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  cfg = json.loads((tmp_path / "a" / "config.json").read_text())
  assert cfg["train"]["objective"]["attack"]["start_epoch"] == 1
  assert cfg["train"]["discard"] == {"epoch": 1, "threshold": 0.5, "num_noise": 20}
