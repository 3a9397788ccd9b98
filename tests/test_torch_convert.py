"""PyTorch checkpoint import (rsjax.models.from_torch / load_torch, rsjax convert).

Checkpoints are written by PyTorch twins of the reference code
(``tests/torch_archs.py``) with random weights and BatchNorm statistics;
the converted rsjax model must give the same logits.
"""

import os

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch_archs as ta  # noqa: E402  (tests/ is on sys.path)

from rsjax import models  # noqa: E402
from rsjax.app import cli  # noqa: E402
from rsjax.records import io  # noqa: E402

# arch -> input height/width: Cohen's CIFAR ResNets need 32x32 (AvgPool2d(8)),
# torchvision's work at any size >= 32, LeNet's fc1 needs 28x28.
_ARCHS = {"lenet": 28, "cifar_resnet20": 32, "resnet18": 32, "resnet50": 64, "cifar_resnet110": 32}


def _checkpoint(arch: str, seed: int = 0, num_classes=None):
  """A reference model with random weights and the checkpoint Cohen et al.'s train.py writes."""
  model = ta.randomize_(ta.cohen_model(arch, num_classes), torch.Generator().manual_seed(seed))
  opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
  return model, {
    "epoch": 90,
    "arch": arch,
    "state_dict": model.state_dict(),
    "optimizer": opt.state_dict(),
  }


def _inputs(hw: int, channels: int, sigma: float = 0.25, clean: int = 2, noisy: int = 6):
  """``clean`` images in [0, 1] and ``noisy`` Gaussian-noise copies of the first one (NHWC)."""
  rng = np.random.default_rng(1)
  x = rng.uniform(size=(clean, hw, hw, channels)).astype(np.float32)
  xn = x[:1] + sigma * rng.standard_normal((noisy, hw, hw, channels)).astype(np.float32)
  return np.concatenate([x, xn])


def _torch_logits(model, x_nhwc):
  with torch.no_grad():
    return model(torch.from_numpy(np.ascontiguousarray(x_nhwc.transpose(0, 3, 1, 2)))).numpy()


def _assert_same(out, ref, noisy_from: int = 2):
  rel = np.max(np.abs(out - ref)) / np.max(np.abs(ref))
  assert rel <= 1e-4, rel
  np.testing.assert_array_equal(out[noisy_from:].argmax(1), ref[noisy_from:].argmax(1))


@pytest.mark.parametrize(
  "arch",
  [
    "lenet",
    "cifar_resnet20",
    "resnet18",
    "resnet50",
    pytest.param("cifar_resnet110", marks=pytest.mark.slow),
  ],
)
def test_logits_match_pytorch(arch, tmp_path):
  model, ckpt = _checkpoint(arch)
  path = tmp_path / "checkpoint.pth.tar"
  torch.save(ckpt, path)
  # Consistency's MNIST LeNet is Sequential(Identity, net): nothing says so in the
  # state dict, so it takes normalize=None (test_normalized_cohen_lenet: the refusal).
  apply_fn, params = models.from_torch(path, normalize=None if arch == "lenet" else "auto")
  hw = _ARCHS[arch]
  x = _inputs(hw, 1 if arch == "lenet" else 3)
  out = np.asarray(jax.jit(apply_fn)(params, x))
  ref = _torch_logits(model, x)
  assert out.shape == ref.shape == (len(x), 1000 if arch in ("resnet18", "resnet50") else 10)
  _assert_same(out, ref)


def test_prefixes_and_detection():
  """Bare, DataParallel-wrapped and Sequential(NormalizeLayer, ...) state dicts give one model."""
  model, ckpt = _checkpoint("lenet", num_classes=7)
  bare = model[1].state_dict()
  variants = [
    bare,
    {"module." + k: v for k, v in bare.items()},
    {"1.module." + k: v for k, v in bare.items()},
    {k: v.numpy() for k, v in ckpt["state_dict"].items()},
  ]  # NumPy, no 'arch'
  x = _inputs(28, 1)
  ref = _torch_logits(model, x)
  for sd, wrapped in zip(variants, [False, False, True, True], strict=True):
    net, config = models.load_torch(sd, normalize=None if wrapped else "auto")
    assert config["torch_arch"] == "lenet" and config["num_classes"] == 7
    assert config["normalization"].startswith("none")
    _assert_same(np.asarray(net(x)), ref)


def test_normalization_buffers_and_override():
  """Normalization stored as buffers is carried over; ``normalize=`` overrides the default."""
  _, ckpt = _checkpoint("cifar_resnet20")
  sd = dict(ckpt["state_dict"])
  net, _ = models.load_torch(sd)
  assert net.normalize.mean == pytest.approx(ta.CIFAR10[0])
  assert net.normalize.std == pytest.approx(ta.CIFAR10[1])
  sd["0.means"], sd["0.sds"] = torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0.5, 0.6, 0.7])
  net, config = models.load_torch(sd)
  assert net.normalize.mean == pytest.approx((0.1, 0.2, 0.3))
  assert net.normalize.std == pytest.approx((0.5, 0.6, 0.7))
  assert config["model_kwargs"]["normalize"][1] == pytest.approx([0.5, 0.6, 0.7])
  net, _ = models.load_torch(sd, normalize=None)
  assert net.normalize is None


def test_normalized_cohen_lenet(tmp_path, capsys):
  """A Cohen-format LeNet behind a NormalizeLayer (values not in the state dict) is refused
  without normalize=, and certifies with PyTorch's logits when it is given."""
  mean, std = [0.1307], [0.3081]
  torch_net = ta.randomize_(
    torch.nn.Sequential(ta.NormalizeLayer(mean, std), ta.LeNet()), torch.Generator().manual_seed(3)
  )
  path = str(tmp_path / "lenet_normalized.pth.tar")
  torch.save({"arch": "lenet", "state_dict": torch_net.state_dict()}, path)
  assert not any(k.startswith("0.") for k in torch_net.state_dict())  # nothing to read
  with pytest.raises(
    models.UnknownNormalizationError,
    match=r"Sequential\(layer 0, lenet\).*"
    r"pass normalize=",
  ) as e:
    models.from_torch(path)
  assert "\n" not in str(e.value)
  x = _inputs(28, 1)
  ref = _torch_logits(torch_net, x)
  for normalize in ("mnist", (mean, std)):
    net, config = models.load_torch(path, normalize=normalize)
    assert config["normalization"] == "mean (0.1307) std (0.3081): given"
    apply_fn, params = models.to_apply_fn(net)
    _assert_same(np.asarray(apply_fn(params, x)), ref)
  # Without the normalization the logits are far off (what the import used to do silently).
  apply_fn, params = models.from_torch(path, normalize=None)
  assert np.max(np.abs(np.asarray(apply_fn(params, x)) - ref)) > 0.1 * np.max(np.abs(ref))
  # The command: the same refusal in its words, then the normalization it uses, printed.
  out = str(tmp_path / "rows.tsv")
  flags = [
    "--dataset",
    "mnist5k",
    "--N0",
    "16",
    "--N",
    "64",
    "--max",
    "1",
    "--sigma",
    "0.25",
    "--quiet",
  ]
  assert cli.main(["certify", "--torch-checkpoint", path, out, *flags]) == 2
  err = capsys.readouterr().err
  assert "pass --normalize none, a dataset name" in err and err.count("\n") == 1
  assert not os.path.exists(out)
  assert (
    cli.main(["certify", "--torch-checkpoint", path, out, *flags, "--normalize", "0.1307/0.3081"])
    == 0
  )
  assert "input normalization mean (0.1307) std (0.3081): given" in capsys.readouterr().out
  assert cli.main(["convert", path, str(tmp_path / "wd"), "--normalize", "bogus"]) == 2
  assert "--normalize bogus: expected none, a dataset name" in capsys.readouterr().err


def test_unmapped_layer_warns_and_inferred_normalization_is_said():
  _, ckpt = _checkpoint("cifar_resnet20")
  _, config = models.load_torch(ckpt)
  assert config["normalization"].startswith(
    "mean (0.4914, 0.4822, 0.4465) std (0.2023, 0.1994, 0.201): cifar10's, inferred from"
  )
  sd = dict(ckpt["state_dict"])
  sd["0.scale"] = torch.ones(3)
  with pytest.warns(UserWarning, match=r"layer 0 .* not mapped \(ignored\): \[scale\]"):
    models.load_torch(sd)


def test_mismatch_is_one_clear_line():
  _, ckpt = _checkpoint("lenet")
  sd = dict(ckpt["state_dict"])
  with pytest.raises(
    ValueError,
    match=r"missing keys \[bn1\.bias, .* more\)\], unexpected keys "
    r"\[conv1\.bias, conv2\.bias, .*\]; known architectures: "
    r".*cifar_resnet20.*resnet50.*lenet",
  ) as e:
    models.load_torch(sd, arch="cifar_resnet20")
  assert "\n" not in str(e.value)
  sd["1.extra.weight"] = torch.zeros(3)
  with pytest.raises(ValueError, match=r"unexpected keys \[extra\.weight\]"):
    models.load_torch(sd)
  del sd["1.extra.weight"], sd["1.fc1.bias"]
  with pytest.raises(ValueError, match=r"missing keys \[fc1\.bias\]"):
    models.load_torch(sd)
  with pytest.raises(ValueError, match=r"shapes differ .*fc1\.weight"):
    models.load_torch(ckpt["state_dict"], input_shape=(32, 32, 1))
  with pytest.raises(ValueError, match=r"unknown architecture 'vgg16'; known architectures"):
    models.load_torch(ckpt["state_dict"], arch="vgg16")
  with pytest.raises(ValueError, match="cannot recognize the architecture"):
    models.load_torch({"features.0.weight": torch.zeros(2, 2)})


def test_saved_model_needs_no_torch_to_reload(tmp_path):
  model, ckpt = _checkpoint("cifar_resnet20")
  net, config = models.load_torch(ckpt)
  models.save_model(tmp_path / "wd", net, config)
  again, saved = models.load_model(tmp_path / "wd")
  assert saved["model"] == "cifar_resnet" and saved["model_kwargs"]["depth"] == 20
  x = _inputs(32, 3)
  apply_fn, params = models.to_apply_fn(again)  # eval mode (a rebuilt model is in train mode)
  _assert_same(np.asarray(apply_fn(params, x)), _torch_logits(model, x))
  with pytest.raises(ValueError, match="already holds checkpoints"):
    models.save_model(tmp_path / "wd", net, config)


def test_cli_certify_torch_checkpoint_and_convert(tmp_path, capsys):
  """``certify --torch-checkpoint`` and ``convert`` + ``certify WORKDIR`` write the same rows."""
  _, ckpt = _checkpoint("lenet")
  path = str(tmp_path / "lenet.pth")
  torch.save(ckpt, path)
  common = ["--N0", "16", "--N", "64", "--batch", "64", "--max", "2", "--sigma", "0.25", "--quiet"]
  rows1 = str(tmp_path / "torch.tsv")
  assert (
    cli.main(
      [
        "certify",
        "--torch-checkpoint",
        path,
        rows1,
        "--dataset",
        "mnist5k",
        "--normalize",
        "none",
        *common,
      ]
    )
    == 0
  )
  wd = str(tmp_path / "converted")
  assert cli.main(["convert", path, wd, "--dataset", "mnist5k", "--normalize", "none"]) == 0
  rows2 = str(tmp_path / "converted.tsv")
  assert cli.main(["certify", wd, rows2, *common]) == 0
  a, b = io.read_certify(rows1), io.read_certify(rows2)
  assert len(a.idx) == 2
  for col in ("idx", "label", "predict", "radius", "correct"):
    np.testing.assert_array_equal(getattr(a, col), getattr(b, col))
  capsys.readouterr()
  assert cli.main(["analyze", rows1]) == 0
  assert "r=0" in capsys.readouterr().out
  # Errors are one line, status 2.
  assert cli.main(["certify", "--torch-checkpoint", path, rows1, "--sigma", "0.25"]) == 2
  assert "--dataset is required" in capsys.readouterr().err
  assert (
    cli.main(
      [
        "certify",
        "--torch-checkpoint",
        path,
        rows1,
        "--dataset",
        "mnist5k",
        "--normalize",
        "none",
        "--torch-arch",
        "resnet50",
        *common,
      ]
    )
    == 2
  )
  err = capsys.readouterr().err
  assert "does not fit resnet50" in err and err.count("\n") == 1
  assert cli.main(["certify", rows1, "--dataset", "mnist5k", *common]) == 2
  assert "give MODEL_DIR" in capsys.readouterr().err
  assert os.path.exists(os.path.join(wd, "config.json"))
