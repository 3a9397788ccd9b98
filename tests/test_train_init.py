"""``rsjax train --init DIR``: training that starts from a model directory's weights (the
fine-tuned child of ``rsjax recertify``)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from rsjax import models
from rsjax.app import cli
from rsjax.runs.runner import fingerprint


def _train(out, *more):
  return cli.main([str(a) for a in ("train", "--dataset", "digits", "--model", "mlp", "--sigma",
                                    "0.5", "--batch", "64", "--out", out, "--quiet", *more)])  # fmt: skip


def _params(directory):
  return models.to_apply_fn(models.load_model(directory)[0])[1]


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
  d = tmp_path_factory.mktemp("init") / "parent"
  assert _train(d, "--epochs", "1", "--lr", "0.1") == 0
  return d


def test_init_starts_from_the_parents_weights(parent, tmp_path):
  # A step this small moves no weight far: the child is its parent's weights, fine-tuned.
  assert _train(tmp_path / "tuned", "--init", parent, "--epochs", "1", "--lr", "1e-7",
                "--seed", "3") == 0  # fmt: skip
  assert _train(tmp_path / "fresh", "--epochs", "1", "--lr", "1e-7", "--seed", "3") == 0
  p, t, f = _params(parent), _params(tmp_path / "tuned"), _params(tmp_path / "fresh")
  for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(t), strict=True):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-4)
  assert fingerprint(t) != fingerprint(p)  # it did train: its own fingerprint
  far = max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
            for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(f), strict=True))  # fmt: skip
  assert far > 0.01  # a fresh start is elsewhere
  cfg = models.load_model(tmp_path / "tuned")[1]
  assert cfg["derived_from"] == {"transform": "fine-tune", "init": fingerprint(p)}
  assert "derived_from" not in models.load_model(tmp_path / "fresh")[1]


def test_init_refuses_another_architecture(parent, tmp_path, capsys):
  out = tmp_path / "cnn"
  code = cli.main([str(a) for a in ("train", "--dataset", "digits", "--model", "cnn", "--init",
                                    parent, "--epochs", "1", "--out", out, "--quiet")])  # fmt: skip
  assert code != 0
  assert "--init" in capsys.readouterr().err and not (out / "config.json").exists()
