"""Any PyTorch module as it is (``rsjax.models.from_torch_module``, ``torch.export``).

Models a user writes in plain PyTorch (``tests/torch_user_models.py``: WideResNet-16-4,
DenseNet-BC, a small ViT, a GroupNorm + SiLU net) give PyTorch's logits within a relative
1e-4 of their scale (``max |diff| / max |logit|``; float32 rounding is about 1e-6 here) on
clean and noisy inputs, at batch sizes other than the exported one; Cohen et al.'s CIFAR
ResNet-110 gives the hand-written converter's logits (``rsjax.models.from_torch``) within the
same tolerance and the same certify counts on the same key. Needs PyTorch (skipped without).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import jax  # noqa: E402
import torch_archs as ta  # noqa: E402  (tests/ is on sys.path)
import torch_user_models as um  # noqa: E402

import rsjax  # noqa: E402
from rsjax import models  # noqa: E402

#: The largest ``max |logit diff| / max |logit|`` accepted between PyTorch and JAX.
RTOL = 1e-4

USER_MODELS = {
  "wide_resnet_16_4": lambda: um.WideResNet(16, 4),
  "densenet": lambda: um.DenseNet(blocks=3, layers=4, growth=12),
  "vit": lambda: um.ViT(size=32, patch=4, dim=64, depth=2, heads=4),
  "groupnorm_silu": lambda: um.GroupNormNet(width=16, groups=4),
}


def _inputs(n_clean: int = 2, n_noisy: int = 3, sigma: float = 0.5) -> np.ndarray:
  """NHWC ``[n, 32, 32, 3]``: images in [0, 1] and noisy copies of the first one."""
  rng = np.random.default_rng(1)
  x = rng.uniform(size=(n_clean, 32, 32, 3)).astype(np.float32)
  xn = x[:1] + sigma * rng.standard_normal((n_noisy, 32, 32, 3)).astype(np.float32)
  return np.concatenate([x, xn])


def _torch_logits(module, x_nhwc: np.ndarray) -> np.ndarray:
  with torch.no_grad():
    return module(torch.from_numpy(np.ascontiguousarray(x_nhwc.transpose(0, 3, 1, 2)))).numpy()


def _rel(a: np.ndarray, b: np.ndarray) -> float:
  return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def _user_model(name: str):
  torch.manual_seed(0)
  return um.randomize_stats_(USER_MODELS[name]())


@pytest.mark.parametrize("name", sorted(USER_MODELS))
def test_logits_match_pytorch(name):
  module = _user_model(name)
  apply_fn, params = models.from_torch_module(module, torch.rand(2, 3, 32, 32))
  x = _inputs()
  out = np.asarray(jax.jit(apply_fn)(params, x))  # batch 5, exported at 2
  ref = _torch_logits(module, x)
  assert out.shape == ref.shape == (5, 10)
  assert _rel(out, ref) <= RTOL, _rel(out, ref)
  np.testing.assert_array_equal(out.argmax(1), ref.argmax(1))
  one = np.asarray(apply_fn(params, x[:1]))  # batch 1, eager
  assert _rel(one, ref[:1]) <= RTOL


def test_normalize_is_applied_before_the_module():
  module = _user_model("groupnorm_silu")
  apply_fn, params = models.from_torch_module(module, torch.rand(2, 3, 32, 32), normalize="cifar10")
  x = _inputs()
  mean, std = (np.asarray(v, np.float32) for v in models.NORMALIZATION["cifar10"])
  ref = _torch_logits(module, (x - mean) / std)
  assert _rel(np.asarray(jax.jit(apply_fn)(params, x)), ref) <= RTOL


@pytest.mark.slow
def test_cohen_resnet110_matches_the_hand_written_conversion():
  """The module path and ``from_torch``: the same logits, the same counts on the same key."""
  module = ta.randomize_(ta.cohen_model("cifar_resnet110"), torch.Generator().manual_seed(0))
  # Cohen's Sequential(NormalizeLayer, net): the module normalizes its input itself.
  g_fn, g_params = models.from_torch_module(module, torch.rand(2, 3, 32, 32))
  h_fn, h_params = models.from_torch(module.state_dict(), "cifar_resnet110")
  x = _inputs(2, 2)
  g, h = np.asarray(jax.jit(g_fn)(g_params, x)), np.asarray(jax.jit(h_fn)(h_params, x))
  ref = _torch_logits(module, x)
  assert _rel(g, ref) <= RTOL and _rel(h, ref) <= RTOL and _rel(g, h) <= RTOL
  np.testing.assert_array_equal(g.argmax(1), h.argmax(1))
  kw = {"sigma": 0.25, "num_classes": 10, "n0": 16, "n": 128, "batch_size": 64}
  a = rsjax.certify(0, g_fn, g_params, x[:2], **kw)
  b = rsjax.certify(0, h_fn, h_params, x[:2], **kw)
  np.testing.assert_array_equal(a.counts, b.counts)
  np.testing.assert_array_equal(a.counts_selection, b.counts_selection)


def test_unsupported_operator_is_one_line_naming_it():
  class Cumulative(torch.nn.Module):
    def forward(self, x):
      return torch.cumsum(x.flatten(1), 1)[:, :10]

  with pytest.raises(models.UnsupportedOperatorError) as e:
    models.from_torch_module(Cumulative(), torch.rand(2, 3, 8, 8))
  assert e.value.operator == "aten.cumsum.default"
  assert "aten.cumsum.default" in str(e.value) and "\n" not in str(e.value)


def test_two_outputs_and_untraceable_forwards_are_refused():
  class Two(torch.nn.Module):
    def forward(self, x):
      return x.mean((2, 3)), x.amax((2, 3))

  class DataDependent(torch.nn.Module):
    def forward(self, x):
      return x.mean((2, 3)) if x.sum() > 0 else -x.mean((2, 3))

  with pytest.raises(ValueError, match="returns 2 tensors"):
    models.from_torch_module(Two(), torch.rand(2, 3, 8, 8))
  with pytest.raises(ValueError, match="torch.export cannot capture"):
    models.from_torch_module(DataDependent(), torch.rand(2, 3, 8, 8))


def test_model_directory_round_trip(tmp_path):
  """``save_model`` then ``load_model``: the same logits and parameters' fingerprint; the
  config holds the graph (so its digest binds it) and says the normalization."""
  from rsjax.runs.runner import fingerprint

  module = _user_model("groupnorm_silu")
  model, config = models.load_torch_module(module, torch.rand(2, 3, 32, 32))
  assert config["model"] == "torch_graph" and config["torch_arch"] == "GroupNormNet"
  assert len(config["graph_digest"]) == 64 and config["normalization"].startswith("none")
  models.save_model(tmp_path / "m", model, config)
  again, _ = models.load_model(tmp_path / "m")
  f1, p1 = models.to_apply_fn(model)
  f2, p2 = models.to_apply_fn(again)
  assert fingerprint(p1) == fingerprint(p2)
  x = _inputs()
  np.testing.assert_array_equal(np.asarray(f1(p1, x)), np.asarray(f2(p2, x)))
