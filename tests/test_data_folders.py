"""CIFAR-10 and ImageNet from the folders PyTorch users keep (``rsjax.data._storage``).

The folders are built here from real images (``tests/data/foolbox``: foolbox 3.3.4's
CIFAR-10 test images and ImageNet JPEGs, MIT); torchvision's output for each image is
pinned there by SHA-256 (``make_reference.py``), and rsjax's must equal it byte for byte.
"""

import hashlib
import json
import os
import pickle
import re

import numpy as np
import pytest

from rsjax import data
from rsjax.data import _images, _storage

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "foolbox")
_PINNED = json.load(open(os.path.join(HERE, "torchvision_sha256.json")))


def _pil_reference(path):
  """float32 HWC: torchvision's ImageNet test transform written out with PIL alone
  (``pil_loader``; ``Resize(256)``: shorter side 256, the longer ``int(256 * long / short)``,
  bilinear; ``CenterCrop(224)``: offsets ``int(round((size - 224) / 2))``; ``ToTensor``)."""
  from PIL import Image

  with open(path, "rb") as f:
    image = Image.open(f).convert("RGB")
  if not os.path.basename(path).startswith("cifar10_"):
    w, h = image.size
    size = (256, int(256 * h / w)) if w <= h else (int(256 * w / h), 256)
    image = image.resize(size, Image.BILINEAR)
    w, h = image.size
    top, left = int(round((h - 224) / 2.0)), int(round((w - 224) / 2.0))
    image = image.crop((left, top, left + 224, top + 224))
  return np.asarray(image).astype(np.float32) / np.float32(255.0)


def _reference():
  """SHA-256 of torchvision's output per image: pinned (made with torchvision under the same
  Pillow), else PIL with torchvision's arithmetic (``_pil_reference``) under this Pillow."""
  import PIL

  if PIL.__version__ == _PINNED["pillow"]:
    return _PINNED["images"]
  images = {}
  for f in os.listdir(HERE):
    if f.endswith((".png", ".jpg")):
      x = _pil_reference(os.path.join(HERE, f))
      images[f] = {
        "float32_sha256": _sha(x),
        "uint8_sha256": _sha(np.round(x * 255).astype(np.uint8)),
      }
  return images


_NAME = re.compile(r"^(cifar10|imagenet)_(\d+)_(\d+)\.(png|jpg)$")


def _real(kind):
  """``[(file, row, label)]`` of the foolbox images of ``kind`` ("cifar10", "imagenet")."""
  found = [_NAME.match(f) for f in sorted(os.listdir(HERE))]
  return [(m.group(0), int(m.group(2)), int(m.group(3))) for m in found if m and m[1] == kind]


def _sha(a):
  return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


REFERENCE = _reference()


def test_pil_arithmetic_is_torchvisions_pinned_output():
  import PIL

  if PIL.__version__ != _PINNED["pillow"]:
    pytest.skip(f"torchvision's output was pinned under Pillow {_PINNED['pillow']}")
  for f, pinned in _PINNED["images"].items():
    assert _sha(_pil_reference(os.path.join(HERE, f))) == pinned["float32_sha256"], f


def write_cifar_batches(folder, files=None, train=False):
  """A ``cifar-10-batches-py`` folder whose test batch holds ``files`` (row order)."""
  from PIL import Image

  files = _real("cifar10") if files is None else files
  os.makedirs(folder, exist_ok=True)
  rows = [
    np.asarray(Image.open(os.path.join(HERE, f))).transpose(2, 0, 1).reshape(-1) for f, *_ in files
  ]
  batch = {"batch_label": "testing batch 1 of 1", "labels": [y for *_, y in files]}
  batch.update(data=np.stack(rows).astype(np.uint8), filenames=[f for f, *_ in files])
  names = ["test_batch"] + ([f"data_batch_{k}" for k in range(1, 6)] if train else [])
  for name in names:
    with open(os.path.join(folder, name), "wb") as f:
      pickle.dump(batch, f, protocol=2)
  return folder


def write_imagenet_val(root, files=None):
  """``root/val/<wnid>/<file>`` of the foolbox ImageNet JPEGs; returns ``root``."""
  import shutil

  files = _real("imagenet") if files is None else files
  wnids = _storage.imagenet_wnids()
  for f, _, label in files:
    os.makedirs(os.path.join(root, "val", wnids[label]), exist_ok=True)
    shutil.copy(os.path.join(HERE, f), os.path.join(root, "val", wnids[label], f))
  return str(root)


@pytest.fixture
def cifar_dir(tmp_path):
  write_cifar_batches(str(tmp_path / "cifar-10-batches-py"))
  return str(tmp_path)


@pytest.fixture
def imagenet_dir(tmp_path):
  return write_imagenet_val(tmp_path / "imagenet")


def test_cifar10_from_batches_is_torchvisions(cifar_dir):
  ds = data.load("cifar10", "test", data_dir=cifar_dir)
  assert isinstance(ds, data.CifarBatchesDataset) and ds.storage == "cifar-10-batches-py"
  assert len(ds) == 20 and ds.num_classes == 10 and ds.input_shape == (32, 32, 3)
  x, y = ds.get_batch(np.arange(20))
  files = _real("cifar10")
  assert [r for _, r, _ in files] == list(range(20))  # index i is test_batch row i
  np.testing.assert_array_equal(y, [label for *_, label in files])
  assert x.dtype == np.float32
  for (f, *_), xi in zip(files, x, strict=True):
    assert _sha(xi) == REFERENCE[f]["float32_sha256"], f
  assert ds.image_name(3) == "test_batch[3]"


def test_cifar10_folder_itself_and_train_split(tmp_path):
  folder = write_cifar_batches(str(tmp_path / "batches"), train=True)
  test = data.load("cifar10", "test", data_dir=folder)
  train = data.load("cifar10", "train", data_dir=folder)
  assert len(test) == 20 and len(train) == 100
  assert train.image_name(25) == "data_batch_2[5]"
  np.testing.assert_array_equal(train.get_batch(np.array([25]))[0], test.get_batch([5])[0])


def test_imagenet_folder_order_labels_and_bytes(imagenet_dir):
  ds = data.load("imagenet2012", "test", data_dir=imagenet_dir)
  assert isinstance(ds, data.ImageFolderDataset) and ds.split == "test"
  assert len(ds) == 10 and ds.num_classes == 1000 and ds.input_shape == (224, 224, 3)
  # torchvision's ImageFolder order: classes sorted by WordNet id, files sorted in each.
  assert ds.files == [
    "n01614925/imagenet_17_22.jpg",  # class 22: bald eagle
    "n02006656/imagenet_14_129.jpg",
    "n02172182/imagenet_19_305.jpg",
    "n02259212/imagenet_18_317.jpg",
    "n02815834/imagenet_02_438.jpg",
    "n03249569/imagenet_10_541.jpg",
    "n03376595/imagenet_01_559.jpg",
    "n03594945/imagenet_06_609.jpg",  # class 609: jeep, two images
    "n03594945/imagenet_07_609.jpg",
    "n03680355/imagenet_11_630.jpg",
  ]
  x, y = ds.get_batch(np.arange(10))
  np.testing.assert_array_equal(y, [int(f.split("_")[-1][:-4]) for f in ds.files])
  for name, xi in zip(ds.files, x, strict=True):
    assert _sha(xi) == REFERENCE[name.split("/")[1]]["float32_sha256"], name
  u = ds.get_uint8([5])  # the 1024 x 683 one
  assert u.dtype == np.uint8 and _sha(u[0]) == REFERENCE["imagenet_10_541.jpg"]["uint8_sha256"]


@pytest.mark.parametrize("name", ["gray_541.jpg", "cmyk_541.jpg"])
def test_grayscale_and_cmyk_become_rgb_as_torchvision(name):
  from PIL import Image

  mode = Image.open(os.path.join(HERE, name)).mode
  assert mode == ("L" if name.startswith("gray") else "CMYK")
  image = _images.decode(os.path.join(HERE, name), data.resize_center_crop)
  assert image.shape == (224, 224, 3) and image.dtype == np.uint8
  assert _sha(image) == REFERENCE[name]["uint8_sha256"]
  assert _sha(image.astype(np.float32) / np.float32(255)) == REFERENCE[name]["float32_sha256"]


def test_torchvision_itself_when_installed(imagenet_dir, cifar_dir):
  """Against torchvision live (skipped where it is not installed: not a dependency)."""
  try:
    import torch
    from torchvision import datasets, transforms
  except Exception:  # noqa: BLE001 -- absent, or built for another torch
    pytest.skip("torchvision is not importable here")
  tf = transforms.Compose(
    [transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor()]
  )
  theirs = datasets.ImageFolder(os.path.join(imagenet_dir, "val"), transform=tf)
  ours = data.load("imagenet2012", "validation", data_dir=imagenet_dir)
  x, _ = ours.get_batch(np.arange(len(ours)))
  for i, (t, _) in enumerate(theirs):
    assert np.array_equal(t.permute(1, 2, 0).numpy(), x[i]), i
  assert [os.path.relpath(p, theirs.root) for p, _ in theirs.samples] == ours.files
  assert torch is not None


def test_skip_selects_cohens_images(imagenet_dir):
  # Cohen et al. certify ImageFolder(val) rows 0, 100, ...: --skip picks the same rows.
  ds = data.load("imagenet2012", "test", data_dir=imagenet_dir)
  picked = list(range(0, len(ds), 3))
  assert [ds.image_name(i) for i in picked] == [ds.files[i] for i in (0, 3, 6, 9)]


def test_readahead_decodes_the_next_chunk_and_holds_a_bounded_number(imagenet_dir):
  ds = data.load("imagenet2012", "test", data_dir=imagenet_dir)
  reader = ds._reader
  reader._ahead = 3
  ds.get_batch(np.array([0, 1]))
  assert list(reader._pending) == [2, 3, 4]
  x, _ = ds.get_batch(np.array([2, 3]))  # found decoded
  assert sorted(reader._pending) == [4, 5, 6] and len(reader._pending) <= 3
  np.testing.assert_array_equal(x[0], ds.get_batch(np.array([2]))[0][0])
  ds.get_batch(np.array([0, 9]))  # a jump: the pending window moves, still bounded
  assert len(reader._pending) <= 3
  reader.close()


def test_images_sha256_binds_names_labels_and_bytes(imagenet_dir, cifar_dir):
  ds = data.load("imagenet2012", "test", data_dir=imagenet_dir)
  a = data.images_sha256(ds, range(0, 10, 2))
  assert a == data.images_sha256(ds, range(0, 10, 2)) and len(a) == 64
  assert a != data.images_sha256(ds, range(1, 10, 2))
  path = os.path.join(imagenet_dir, "val", ds.files[4])
  with open(path, "ab") as f:
    f.write(b"\0")  # the same pixels (PIL ignores trailing bytes), other bytes
  assert data.images_sha256(ds, range(0, 10, 2)) != a
  assert data.images_sha256(ds, range(1, 10, 2)) == data.images_sha256(ds, range(1, 10, 2))
  cifar = data.load("cifar10", "test", data_dir=cifar_dir)
  assert len(data.images_sha256(cifar, range(20))) == 64
  assert data.images_sha256(data.load("digits", "test"), range(3)) is None


# ------------------------------------------------------------------------------ errors


def _one_line(e):
  return "\n" not in str(e.value)


def test_empty_class_folder_is_named(imagenet_dir):
  os.makedirs(os.path.join(imagenet_dir, "val", "n01440764"))
  with pytest.raises(data.FolderError, match="n01440764.*holds no image") as e:
    data.load("imagenet2012", "test", data_dir=imagenet_dir)
  assert _one_line(e) and isinstance(e.value, data.DatasetNotFoundError)


def test_class_folder_not_of_the_dataset(imagenet_dir):
  os.makedirs(os.path.join(imagenet_dir, "val", "cats"))
  open(os.path.join(imagenet_dir, "val", "cats", "a.jpg"), "wb").close()
  with pytest.raises(data.FolderError, match="cats' is not a class of 'imagenet2012'.*1000") as e:
    data.load("imagenet2012", "test", data_dir=imagenet_dir)
  assert _one_line(e)


def test_corrupt_image_is_named(imagenet_dir):
  ds = data.load("imagenet2012", "test", data_dir=imagenet_dir)
  with open(os.path.join(imagenet_dir, "val", ds.files[5]), "wb") as f:
    f.write(b"not a jpeg")
  ds.get_batch(np.array([4]))
  with pytest.raises(data.CorruptImageError, match="imagenet_10_541.jpg") as e:
    ds.get_batch(np.array([5]))
  assert _one_line(e)


def test_mixed_layouts_are_refused(imagenet_dir, cifar_dir):
  os.makedirs(os.path.join(imagenet_dir, "imagenet2012"))
  with pytest.raises(data.FolderError, match="both 'val' and TFDS's imagenet2012/"):
    data.load("imagenet2012", "test", data_dir=imagenet_dir)
  os.makedirs(os.path.join(cifar_dir, "cifar10"))
  with pytest.raises(data.FolderError, match="both 'cifar-10-batches-py' and TFDS's cifar10/"):
    data.load("cifar10", "test", data_dir=cifar_dir)
  val = os.path.join(imagenet_dir, "val")
  open(os.path.join(val, "loose.JPEG"), "wb").close()
  with pytest.raises(data.FolderError, match="mixes layouts.*'loose.JPEG'"):
    data.load("imagenet2012", "test", data_dir=val)


def test_slices_and_missing_batches(cifar_dir, tmp_path):
  with pytest.raises(data.FolderError, match="slices are TFDS's.*--skip"):
    data.load("cifar10", "test[:10]", data_dir=cifar_dir)
  with pytest.raises(data.FolderError, match="lacks data_batch_1.*'train'"):
    data.load("cifar10", "train", data_dir=cifar_dir)


def test_a_pickle_that_runs_code_is_refused(tmp_path):
  folder = tmp_path / "cifar-10-batches-py"
  folder.mkdir()

  class Boom:
    def __reduce__(self):
      return (os.system, ("echo pwned",))

  with open(folder / "test_batch", "wb") as f:
    pickle.dump({"data": Boom(), "labels": [0]}, f, protocol=2)
  with pytest.raises(data.FolderError, match="not a CIFAR-10 batch file.*system"):
    data.load("cifar10", "test", data_dir=str(tmp_path))


def test_no_folder_falls_back_to_tfds(tmp_path):
  with pytest.raises(data.DatasetNotFoundError, match="tfds build cifar10"):
    data.load("cifar10", "test", data_dir=str(tmp_path))


# ------------------------------------------------------------------- any image folder


def write_class_folder(root, kind):
  """``root/<label>/<file>`` of the foolbox images of ``kind``; returns ``root``."""
  import shutil

  for f, _, label in _real(kind):
    os.makedirs(os.path.join(root, f"{label:04d}"), exist_ok=True)
    shutil.copy(os.path.join(HERE, f), os.path.join(root, f"{label:04d}", f))
  return str(root)


def test_any_class_folder_by_its_path(tmp_path):
  small = write_class_folder(tmp_path / "cifar_png", "cifar10")
  ds = data.load(small, "test")
  assert isinstance(ds, data.ImageFolderDataset) and ds.name == small
  assert ds.input_shape == (32, 32, 3) and ds.num_classes == 8  # its own size and classes
  x, y = ds.get_batch(np.arange(len(ds)))
  for name, xi, yi in zip(ds.files, x, y, strict=True):
    assert _sha(xi) == REFERENCE[name.split("/")[1]]["float32_sha256"], name
    assert ds.classes[yi] == name.split("/")[0]
  large = write_class_folder(tmp_path / "photos", "imagenet")
  ds = data.load(large, "validation")
  assert ds.input_shape == (224, 224, 3) and ds.num_classes == 9  # 9 classes, ranked 0..8
  x, y = ds.get_batch(np.arange(len(ds)))
  assert y.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 7, 8]  # 0609 holds two
  for name, xi in zip(ds.files, x, strict=True):
    assert _sha(xi) == REFERENCE[name.split("/")[1]]["float32_sha256"], name
  assert data.images_sha256(ds, range(3)) is not None


def test_a_registry_name_is_never_a_folder(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  write_class_folder(tmp_path / "digits", "cifar10")
  assert not isinstance(data.load("digits", "test"), data.ImageFolderDataset)
