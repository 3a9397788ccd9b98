"""Tests of the ACR-study analyses (Sun et al. 2025): Theorem 1's budget, p_A from counts,
the easy/hard split and the per-sample gradient norms."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

import rsjax
from rsjax import metrics
from rsjax.records import io


def test_constant_classifier_budget_end_to_end():
  """A constant classifier's ACR, certified with rsjax.certify, exceeds M at the budget
  N and not just below it (class-balanced inputs: ACR = R(N) / K exactly)."""
  k, sigma, alpha, margin = 4, 0.5, 0.001, 0.35  # M K / sigma = 2.8
  n = metrics.constant_classifier_budget(margin, k, sigma, alpha)
  exact = math.log(alpha) / norm.logcdf(margin * k / sigma)  # the smallest real N that works
  assert n == math.ceil(exact) + 1 and n > exact
  # the paper's printed (inverted) fraction would give a useless N = 2
  assert math.ceil(norm.logcdf(margin * k / sigma) / math.log(alpha)) + 1 == 2

  def constant(params, x):
    return jnp.broadcast_to(jnp.array([5.0, 0.0, 0.0, 0.0]), (x.shape[0], k))

  x = np.zeros((8, 3), np.float32)
  y = np.repeat(np.arange(k), 2)  # balanced: 1/K of the inputs are of the constant class 0

  def acr_at(num):
    cert = rsjax.certify(
      jax.random.key(0),
      constant,
      None,
      x,
      sigma=sigma,
      num_classes=k,
      n0=10,
      n=num,
      alpha=alpha,
      batch_size=4096,
    )
    return metrics.average_certified_radius(
      cert.prediction == y, cert.radius, predict=cert.prediction
    )

  assert acr_at(n) > margin
  assert (
    acr_at(math.floor(exact)) <= margin
  )  # one sample fewer than needed (when exact is not an integer)
  assert acr_at(n) == pytest.approx(sigma * norm.ppf(alpha ** (1 / n)) / k, rel=1e-9)
  with pytest.raises(ValueError, match="margin"):
    metrics.constant_classifier_budget(0.0, k, sigma, alpha)


def _rows(tmp_path, name, labels, counts, predict, radius):
  path = tmp_path / name
  with io.ResultsWriter(path, extra_columns=(metrics.COUNTS_COLUMN,), resume=False) as w:
    for i, (lab, c, p, r) in enumerate(zip(labels, counts, predict, radius, strict=True)):
      w.write(idx=i, label=lab, predict=p, radius=r, counts=metrics.format_counts(c))
  return io.read_certify(path)


def test_label_probability_and_easy_hard_split(tmp_path):
  labels = [0, 1, 2, 1]
  counts = [[90, 10, 0], [70, 30, 0], [0, 0, 100], [50, 50, 0]]
  ref = _rows(tmp_path, "ref.tsv", labels, counts, [0, 0, 2, -1], [1.0, 0.0, 2.0, 0.0])
  pa = metrics.label_probability(ref)
  np.testing.assert_allclose(pa, [0.9, 0.3, 1.0, 0.5])
  other = _rows(tmp_path, "other.tsv", labels, counts, [0, 1, -1, 1], [0.2, 0.6, 0.0, 0.1])
  split = metrics.easy_hard_accuracy(other, (ref.idx, pa), [0.0, 0.5])
  # easy = idx 0, 2, 3 (p_A >= 0.5 under the reference); hard = idx 1
  assert split["num_easy"] == 3 and split["num_hard"] == 1
  np.testing.assert_allclose(split["easy"], [2 / 3, 0.0])
  np.testing.assert_allclose(split["hard"], [1.0, 1.0])
  with pytest.raises(ValueError, match="no p_A for idx"):
    metrics.easy_hard_accuracy(other, {0: 1.0}, [0.0])
  plain = tmp_path / "plain.tsv"
  with io.ResultsWriter(plain, resume=False) as w:
    w.write(idx=0, label=0, predict=0, radius=0.5)
  with pytest.raises(ValueError, match="--save-counts"):
    metrics.label_probability(io.read_certify(plain))


def test_per_sample_gradient_norms_and_table(tmp_path):
  import optax

  from rsjax import training
  from rsjax.metrics import plots
  from rsjax.training.objectives import replicate

  rng = np.random.default_rng(0)
  params = {"w": jnp.asarray(rng.normal(size=(6, 3)), jnp.float32), "b": jnp.zeros(3)}
  apply_fn = _Linear()
  x = rng.uniform(size=(5, 6)).astype(np.float32)
  y = np.array([0, 1, 2, 0, 1], np.int32)
  norms = training.per_sample_gradient_norms(
    jax.random.key(0), apply_fn, params, x, y, sigma=0.5, num_noise=3, batch_size=2
  )
  for i in range(5):  # chunk of input i starts at 2 * (i // 2); noise from the documented keys
    ki = jax.random.fold_in(jax.random.fold_in(jax.random.key(0), 2 * (i // 2)), i % 2)

    def loss(p, i=i, ki=ki):
      xr, yr, d = replicate(ki, jnp.asarray(x[i : i + 1]), jnp.asarray(y[i : i + 1]), 0.5, 3)
      return optax.softmax_cross_entropy_with_integer_labels(apply_fn(p, xr + d), yr).mean()

    g = jax.grad(loss)(params)
    expect = np.sqrt(sum(float(jnp.sum(v**2)) for v in jax.tree.leaves(g)))
    assert norms[i] == pytest.approx(expect, rel=1e-4)
  table = training.gradient_norm_table(norms, np.array([0.9, 0.1, 0.6, 0.2, 0.5]))
  assert table["easy"] == pytest.approx(norms[[0, 2, 4]].mean())
  assert table["hard"] == pytest.approx(norms[[1, 3]].mean())
  assert table["easy_over_hard"] == pytest.approx(table["easy"] / table["hard"])
  out = plots.plot_pa_cdf(tmp_path / "cdf", {"a": [0.1, 0.9, 1.0], "b": [0.5]})
  assert out.endswith(".png") and (tmp_path / "cdf.png").stat().st_size > 1000


class _Linear:
  """Hashable linear apply_fn (a static argument of the jitted norms)."""

  def __call__(self, params, x):
    return x.reshape(x.shape[0], -1) @ params["w"] + params["b"]

  def __hash__(self):
    return 0

  def __eq__(self, other):
    return isinstance(other, _Linear)


@pytest.mark.heavy
def test_cli_train_objective_strategies_and_analyze(tmp_path, capsys):
  import json

  from rsjax.app import cli

  run = lambda *a: cli.main([str(v) for v in a])  # noqa: E731
  out = tmp_path / "m"
  assert (
    run(
      "train",
      "--dataset",
      "digits",
      "--model",
      "mlp",
      "--sigma",
      "0.25",
      "--epochs",
      "2",
      "--batch",
      "64",
      "--lr",
      "0.1",
      "--out",
      out,
      "--quiet",
      "--num-noise",
      "2",
      "--discard",
      "1",
      "--discard-threshold",
      "0.3",
      "--reweigh",
      "1",
      "--sphere-attack",
      "1",
      "--attack-steps",
      "2",
    )
    == 0
  )
  cfg = json.loads((out / "config.json").read_text())["train"]
  assert cfg["objective"] == {
    "name": "gaussian",
    "num_noise": 2,
    "attack": {"steps": 2, "step_size": 0.25, "norm": "l2", "start_epoch": 1},
  }
  assert cfg["discard"]["threshold"] == 0.3 and cfg["reweigh"]["epoch"] == 1
  hist = json.loads((out / "history.json").read_text())
  assert 0 < hist[1]["kept_fraction"] <= 1
  rows = tmp_path / "c.tsv"
  assert (
    run(
      "certify",
      out,
      rows,
      "--N",
      "200",
      "--N0",
      "20",
      "--skip",
      "20",
      "--batch",
      "400",
      "--save-counts",
      "--quiet",
    )
    == 0
  )
  res = io.read_certify(rows)
  counts = metrics.parse_counts(res.extra["counts"])
  assert counts.shape == (len(res.idx), 10) and np.all(counts.sum(1) == 200)
  capsys.readouterr()
  assert (
    run(
      "analyze", rows, "--radii", "0", "0.25", "--pa-cdf", tmp_path / "cdf.png", "--easy-hard", rows
    )
    == 0
  )
  text = capsys.readouterr().out
  assert "easy" in text and "hard" in text and (tmp_path / "cdf.png").exists()
  assert (
    run(
      "train",
      "--dataset",
      "digits",
      "--model",
      "mlp",
      "--out",
      tmp_path / "x",
      "--objective",
      "macer",
      "--sphere-attack",
      "0",
      "--quiet",
    )
    == 2
  )
  assert "--sphere-attack works with --objective gaussian" in capsys.readouterr().err
  assert (
    run(
      "train",
      "--dataset",
      "digits",
      "--model",
      "mlp",
      "--out",
      tmp_path / "y",
      "--objective",
      "consistency",
      "--objective-arg",
      "epsilon=1",
      "--quiet",
    )
    == 2
  )
  assert "no hyperparameter epsilon" in capsys.readouterr().err
