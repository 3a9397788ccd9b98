"""The same index is the same image in TFDS's copy and in the folders (``rsjax.data._order``).

TFDS shuffles a split by ``md5(split + key)`` when it prepares it; rsjax maps its index ``i``
to torchvision's ``i``-th image and checks each TFDS example's ``id``/``file_name``. What is
checked here offline: the map against TFDS's own hasher, pinned values (Cohen et al.'s first
ImageNet image is ``ILSVRC2012_val_00000293.JPEG``), and TFDS-like sources built in that
order. Not checked here: a copy prepared by ``tfds build`` itself (it needs the data).
"""

import os
import sys

import numpy as np
import pytest

from rsjax import data
from rsjax.data import _order, _tfds

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_data_folders as folders  # noqa: E402


@pytest.mark.parametrize(("name", "split"), list(_order.SIZES))
def test_the_map_is_tfds_own_hash_order(name, split):
  from tensorflow_datasets.core import hashing

  n = _order.SIZES[(name, split)]
  keys, rows = _order._keys(name, split)
  hasher = hashing.Hasher(split)
  ranked = sorted(range(n), key=lambda k: hasher.hash_key(keys[k]))
  tfds_index = np.empty(n, np.int64)
  tfds_index[ranked] = np.arange(n)
  got = _order.torchvision_to_tfds(name, split)
  np.testing.assert_array_equal(got, tfds_index[rows])
  assert sorted(got.tolist()) == list(range(n))


def test_pinned_values():
  assert _order.torchvision_to_tfds("cifar10", "test")[:3].tolist() == [9634, 3449, 6749]
  assert _order.expected_key("cifar10", "test", 7) == ("id", "test_00007")
  # Cohen et al.'s ImageNet index 0: the first tench (n01440764) of the sorted file names.
  assert _order.expected_key("imagenet2012", "validation", 0)[1] == "ILSVRC2012_val_00000293.JPEG"
  assert _order.torchvision_to_tfds("imagenet2012", "validation")[:2].tolist() == [36116, 43112]


class _Source:
  """A TFDS-like source: example ``j`` is the one TFDS's order puts at ``j``."""

  def __init__(self, name, split, image_of, shift=0):
    order = _order.torchvision_to_tfds(name, split)
    self.row_at = np.empty_like(order)
    self.row_at[order] = np.arange(len(order))
    self.name, self.split, self.image_of, self.shift = name, split, image_of, shift

  def __len__(self):
    return len(self.row_at)

  def __getitem__(self, j):
    i = int(self.row_at[(j + self.shift) % len(self)])
    feature, value = _order.expected_key(self.name, self.split, i)
    return {feature: value.encode(), "image": self.image_of(i), "label": i % 10}


def test_tfds_and_the_batch_folder_give_the_same_image_for_an_index(tmp_path):
  rng = np.random.default_rng(0)
  images = rng.integers(0, 256, (10_000, 32, 32, 3), dtype=np.uint8)
  folder = tmp_path / "cifar-10-batches-py"
  folder.mkdir()
  import pickle

  rows = images.transpose(0, 3, 1, 2).reshape(10_000, -1)
  with open(folder / "test_batch", "wb") as f:
    pickle.dump({"data": rows, "labels": [i % 10 for i in range(10_000)]}, f, protocol=2)
  on_disk = data.load("cifar10", "test", data_dir=str(tmp_path))
  spec = _tfds.TFDS_DATASETS["cifar10"]
  source = _Source("cifar10", "test", lambda i: images[i])
  order = _order.torchvision_to_tfds("cifar10", "test")
  tfds_ds = _tfds.TfdsDataset(source, spec, name="cifar10", split="test", order=order)
  picked = np.arange(0, 10_000, 100)  # Cohen et al.'s --skip 100
  x1, y1 = on_disk.get_batch(picked)
  x2, y2 = tfds_ds.get_batch(picked)
  np.testing.assert_array_equal(x1, x2)
  np.testing.assert_array_equal(y1, y2)
  shifted = _Source("cifar10", "test", lambda i: images[i], shift=1)  # another order
  wrong = _tfds.TfdsDataset(shifted, spec, name="cifar10", split="test", order=order)
  with pytest.raises(data.DatasetNotFoundError, match="prepared in another order"):
    wrong.get_batch(np.array([0]))


def test_imagenet_validation_file_names_are_checked():
  spec = _tfds.TFDS_DATASETS["imagenet2012"]
  gray = np.zeros((300, 400, 3), np.uint8)
  order = _order.torchvision_to_tfds("imagenet2012", "validation")
  source = _Source("imagenet2012", "validation", lambda i: gray)
  ds = _tfds.TfdsDataset(source, spec, name="imagenet2012", split="validation", order=order)
  x, _ = ds.get_batch(np.array([0, 100]))
  assert x.shape == (2, 224, 224, 3)
  bad = _Source("imagenet2012", "validation", lambda i: gray, shift=3)
  ds = _tfds.TfdsDataset(bad, spec, name="imagenet2012", split="validation", order=order)
  with pytest.raises(data.DatasetNotFoundError, match="ILSVRC2012_val_00000293.JPEG"):
    ds.get_batch(np.array([0]))


def test_a_folder_and_its_wnids_agree_with_tfds_labels():
  # The folder's label k is TFDS's label k: both are the sorted WordNet ids.
  assert folders._storage.imagenet_wnids()[0] == "n01440764"
  assert len(folders._storage.imagenet_wnids()) == 1000


def test_the_flat_validation_folder_of_the_tar_in_torchvisions_order(tmp_path):
  # ILSVRC2012_img_val.tar unpacked as it is: 50,000 files, no class folders. Read in the
  # order of the same files sorted into <wnid>/ folders, the order TFDS is mapped to.
  import shutil

  val = tmp_path / "val"
  val.mkdir()
  for k in range(1, 50_001):
    (val / f"ILSVRC2012_val_{k:08d}.JPEG").touch()
  real = os.path.join(folders.HERE, "imagenet_10_541.jpg")
  shutil.copy(real, val / "ILSVRC2012_val_00000293.JPEG")
  ds = data.load("imagenet2012", "test", data_dir=str(tmp_path))
  assert len(ds) == 50_000 and ds.num_classes == 1000
  for i in (0, 1, 49, 50, 25_000, 49_999):
    assert ds.files[i] == _order.expected_key("imagenet2012", "validation", i)[1]
  assert ds.files[0] == "ILSVRC2012_val_00000293.JPEG" and ds.labels[0] == 0
  assert np.bincount(ds.labels).tolist() == [50] * 1000
  x, _ = ds.get_batch(np.array([0]))
  ref = folders.REFERENCE["imagenet_10_541.jpg"]["float32_sha256"]
  assert folders._sha(x[0]) == ref
  ds._reader.close()
  (val / "ILSVRC2012_val_00000001.JPEG").unlink()
  with pytest.raises(data.FolderError, match="not ImageNet's flat validation set.*49999 of"):
    data.load("imagenet2012", "test", data_dir=str(tmp_path))


def test_load_maps_a_whole_split_and_leaves_a_slice(monkeypatch, tmp_path):
  tfds = pytest.importorskip("tensorflow_datasets")
  images = np.random.default_rng(1).integers(0, 256, (10_000, 32, 32, 3), dtype=np.uint8)
  whole = _Source("cifar10", "test", lambda i: images[i])
  monkeypatch.setattr(tfds, "data_source", lambda name, split, **kw: whole)
  ds = data.load("cifar10", "test", data_dir=str(tmp_path))
  assert isinstance(ds, data.TfdsDataset) and ds.order is not None
  np.testing.assert_array_equal(ds.get_batch(np.array([7]))[0][0], images[7] / np.float32(255))
  monkeypatch.setattr(tfds, "data_source", lambda name, split, **kw: [whole[j] for j in range(5)])
  assert data.load("cifar10", "test[:5]", data_dir=str(tmp_path)).order is None
