"""``rsjax certify`` of Cohen-format PyTorch ResNets on the folders PyTorch users keep.

A CIFAR-10 batch file of the 20 real foolbox test images and an ImageNet ``val/`` tree of
its real JPEGs (``tests/data/foolbox``), certified from the command line with random
weights; the result files verify against their folder and are refused against a folder
whose images differ. Needs PyTorch (to write the checkpoints).
"""

import os
import shutil
import sys

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import test_data_folders as folders  # noqa: E402
import torch_archs as ta  # noqa: E402

from rsjax import verify  # noqa: E402
from rsjax.app import cli  # noqa: E402


def _checkpoint(arch, path):
  model = ta.randomize_(ta.cohen_model(arch), torch.Generator().manual_seed(0))
  torch.save({"arch": arch, "state_dict": model.state_dict()}, path)
  return str(path)


def _certify(ckpt, out, dataset, data_dir, *more):
  argv = ["certify", "--torch-checkpoint", ckpt, str(out), "--dataset", dataset]
  argv += ["--data-dir", data_dir] if data_dir else []
  argv += ["--sigma", "0.25", "--N0", "8", "--N", "32", "--quiet"]
  assert cli.main([*argv, *more]) == 0
  return str(out)


def test_cifar10_batch_file_certifies_and_verifies(tmp_path, capsys):
  data_dir = str(tmp_path / "cifar")
  folders.write_cifar_batches(os.path.join(data_dir, "cifar-10-batches-py"))
  ckpt = _checkpoint("cifar_resnet20", tmp_path / "cifar_resnet20.pth.tar")
  out = _certify(ckpt, tmp_path / "cifar.tsv", "cifar10", data_dir)
  report = verify.verify(out, data_dir=data_dir)
  assert report.ok and report.rows == 20, report.summary()
  assert "test_batch[0] to test_batch[19]" in report.summary()
  assert cli.main(["verify", out, "--data-dir", data_dir]) == 0
  unchecked = verify.verify(out)  # no folder given: said, not verified against it
  assert "give that folder with --data-dir" in unchecked.summary()
  other = str(tmp_path / "other")
  folders.write_cifar_batches(
    os.path.join(other, "cifar-10-batches-py"), folders._real("cifar10")[::-1]
  )
  refused = verify.verify(out, data_dir=other)
  assert not refused.ok and "is not the one the run read" in refused.summary()
  capsys.readouterr()
  audit = ["audit", out, "--torch-checkpoint", ckpt, "--rows", "2", "--quiet", "--data-dir"]
  assert cli.main([*audit, data_dir]) == 0
  assert "20 images: test_batch[0] to test_batch[19]" in capsys.readouterr().out
  assert cli.main([*audit, other]) != 0
  assert "is not the one the run read" in capsys.readouterr().out


def test_imagenet_folder_certifies_verifies_and_refuses_another(tmp_path):
  data_dir = folders.write_imagenet_val(tmp_path / "imagenet")
  ckpt = _checkpoint("resnet18", tmp_path / "resnet18.pth.tar")
  out = _certify(ckpt, tmp_path / "imagenet.tsv", "imagenet2012", data_dir, "--skip", "3")
  report = verify.verify(out, data_dir=data_dir)
  assert report.ok and report.rows == 4, report.summary()
  assert "n01614925/imagenet_17_22.jpg to n03680355/imagenet_11_630.jpg" in report.summary()
  changed = str(tmp_path / "changed")
  shutil.copytree(data_dir, changed)
  val = os.path.join(changed, "val")
  first = os.path.join(val, "n01614925", "imagenet_17_22.jpg")
  shutil.copy(os.path.join(val, "n02006656", "imagenet_14_129.jpg"), first)
  refused = verify.verify(out, data_dir=changed)
  assert not refused.ok
  text = "\n".join(m.reason for m in refused.mismatches)
  assert "is not the one the run read" in text and "(n01614925/imagenet_17_22.jpg)" in text


def test_a_checkpoint_of_another_class_count_is_refused_before_reading(tmp_path, capsys):
  data_dir = folders.write_imagenet_val(tmp_path / "imagenet")
  model = ta.randomize_(ta.cohen_model("resnet18", 10), torch.Generator().manual_seed(0))
  ckpt = str(tmp_path / "ten.pth.tar")
  torch.save({"arch": "resnet18", "state_dict": model.state_dict()}, ckpt)
  argv = ["certify", "--torch-checkpoint", ckpt, str(tmp_path / "x.tsv"), "--dataset"]
  argv += ["imagenet2012", "--data-dir", data_dir, "--sigma", "0.5", "--quiet"]
  assert cli.main(argv) == 2
  err = capsys.readouterr().err.strip().splitlines()[-1]
  assert "classifies 10 classes, imagenet2012 test (the folder" in err and "has 1000" in err


def test_any_image_folder_by_its_path_certifies_and_verifies(tmp_path):
  root = folders.write_class_folder(tmp_path / "pngs", "cifar10")
  model = ta.randomize_(ta.cohen_model("cifar_resnet20", 8), torch.Generator().manual_seed(0))
  ckpt = str(tmp_path / "eight.pth.tar")
  torch.save({"arch": "cifar_resnet20", "state_dict": model.state_dict()}, ckpt)
  out = _certify(ckpt, tmp_path / "pngs.tsv", root, "", "--max", "6")
  report = verify.verify(out)  # the folder is named by its path
  assert report.ok and report.rows == 6, report.summary()
  assert "0000/cifar10_03_0.png to " in report.summary()
  moved = str(tmp_path / "moved")
  shutil.move(root, moved)
  assert verify.verify(out, data_dir=moved).ok
  os.remove(os.path.join(moved, "0000", "cifar10_03_0.png"))
  assert not verify.verify(out, data_dir=moved).ok
