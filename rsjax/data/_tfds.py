"""TFDS datasets (MNIST, CIFAR-10, ImageNet) read offline through ``tfds.data_source``.

rsjax never downloads: it reads datasets that were prepared in TFDS's
``array_record`` format (random access, no TensorFlow needed to read) and
placed in a local ``data_dir`` (argument, else the ``TFDS_DATA_DIR``
environment variable, else TFDS's default ``~/tensorflow_datasets``).

Images are decoded to uint8 by TFDS and converted to float32 in [0, 1]
(``/ 255``), NHWC. ImageNet images are resized so that their shorter side is
256 (PIL bilinear) and center-cropped to 224 x 224, exactly as the test
transform of Cohen et al. (torchvision ``Resize(256)``, ``CenterCrop(224)``).
The same deterministic transform is applied to the train split; random
augmentation is the training code's business.

Nothing is read eagerly: a split is a random-access ``TfdsDataset``.

Order: TFDS shuffles a split by a hash of its keys when it prepares it. For the whole
CIFAR-10 test and train splits and ImageNet's validation split, index ``i`` is mapped to
torchvision's ``i``-th image (``rsjax.data._order``: the order of the pickled batches and of
``ImageFolder(val)``, Cohen et al.'s), and each example read is checked to be that image
(its ``id`` or ``file_name``), so the same index is the same image in TFDS and in the
folders (``rsjax.data._storage``). A slice (``"test[:500]"``) and other splits keep TFDS's
own order.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import numpy as np

from rsjax.data import _order
from rsjax.data._dataset import Dataset

__all__ = ["DatasetNotFoundError", "TfdsDataset", "TFDS_DATASETS", "load_tfds"]

IMAGENET_RESIZE = 256
IMAGENET_CROP = 224


class DatasetNotFoundError(FileNotFoundError):
  """A dataset is not available locally; the message says how to prepare it."""


def _to_float(image: np.ndarray) -> np.ndarray:
  return np.asarray(image, dtype=np.float32) / 255.0


def resize_center_crop(
  image: np.ndarray, resize: int = IMAGENET_RESIZE, crop: int = IMAGENET_CROP
) -> np.ndarray:
  """torchvision ``Resize(resize)`` + ``CenterCrop(crop)`` on a uint8 ``[H, W, 3]`` image.

  The shorter side becomes ``resize`` (the longer one ``int(resize * long /
  short)``) with PIL's bilinear filter, then the central ``crop x crop``
  window is kept (offsets rounded as torchvision does). Returns uint8
  ``[crop, crop, 3]``.
  """
  from PIL import Image

  image = np.asarray(image)
  if image.ndim == 2:
    image = image[..., None]
  if image.shape[-1] == 1:
    image = np.repeat(image, 3, axis=-1)
  h, w = image.shape[:2]
  if h <= w:
    new_h, new_w = resize, int(resize * w / h)
  else:
    new_h, new_w = int(resize * h / w), resize
  if (new_h, new_w) != (h, w):
    image = np.asarray(Image.fromarray(image).resize((new_w, new_h), Image.BILINEAR))
  top = int(round((new_h - crop) / 2.0))
  left = int(round((new_w - crop) / 2.0))
  return image[top : top + crop, left : left + crop]


@dataclasses.dataclass(frozen=True)
class TfdsSpec:
  """How to read one TFDS dataset."""

  tfds_name: str
  splits: tuple[str, ...]
  num_classes: int
  input_shape: tuple[int, int, int]
  transform: Callable[[np.ndarray], np.ndarray] = _to_float
  note: str = ""


TFDS_DATASETS = {
  "mnist": TfdsSpec("mnist", ("train", "test"), 10, (28, 28, 1)),
  "cifar10": TfdsSpec("cifar10", ("train", "test"), 10, (32, 32, 3)),
  "imagenet2012": TfdsSpec(
    "imagenet2012",
    ("train", "validation"),
    1000,
    (IMAGENET_CROP, IMAGENET_CROP, 3),
    transform=lambda im: _to_float(resize_center_crop(im)),
    note=(
      "TFDS cannot download ImageNet itself: put ILSVRC2012_img_train.tar and "
      "ILSVRC2012_img_val.tar in <download_dir>/manual/ first (see the TFDS "
      "imagenet2012 page). Cohen et al. certify on the 'validation' split."
    ),
  ),
}


class TfdsDataset(Dataset):
  """Random access to a prepared TFDS split; examples are decoded on demand.

  Args:
    source: the ``tfds.data_source(...)`` sequence of example dicts.
    spec: the dataset's ``TfdsSpec``.
    name, split: as given to ``rsjax.data.load``.
    order: int64 ``[N]``, the TFDS index of each index (``rsjax.data._order``), each
      example read checked to be the one expected; None: TFDS's order.
  """

  def __init__(self, source, spec: TfdsSpec, *, name: str, split: str, order=None):
    super().__init__(
      name=name, split=split, num_classes=spec.num_classes, input_shape=spec.input_shape
    )
    self.source = source
    self.spec = spec
    self.order = order
    self._tfds_split = split

  def __len__(self) -> int:
    return len(self.source)

  def _example(self, i: int) -> dict:
    """The example of index ``i``: TFDS's ``i``-th, or with ``order`` torchvision's ``i``-th
    (its ``id``/``file_name`` checked: a copy in another order is refused, never misread)."""
    if self.order is None:
      return self.source[i]
    j = int(self.order[i])
    example = self.source[j]
    feature, want = _order.expected_key(self.spec.tfds_name, self._tfds_split, i)
    have = example.get(feature)
    have = have.decode() if isinstance(have, bytes) else str(have)
    if have != want:
      raise DatasetNotFoundError(
        f"TFDS {self.spec.tfds_name} {self._tfds_split} example {j} is {feature} {have!r}, "
        f"but TFDS's order puts {want!r} (torchvision's image {i}) there: a copy prepared "
        "in another order; read it with a slice (e.g. 'test[:100%]': TFDS's own order)"
      )
    return example

  def _load(self, indices):
    x = np.empty((len(indices), *self.input_shape), dtype=np.float32)
    y = np.empty((len(indices),), dtype=np.int64)
    for k, i in enumerate(indices):
      example = self._example(int(i))
      image = self.spec.transform(example["image"])
      if image.shape != self.input_shape:
        raise ValueError(
          f"{self.name!r} example {int(i)} has shape {image.shape} after decoding, "
          f"expected {self.input_shape}."
        )
      x[k] = image
      y[k] = example["label"]
    return x, y


def _resolved_data_dir(data_dir) -> str:
  if data_dir is not None:
    return os.fspath(data_dir)
  if os.environ.get("TFDS_DATA_DIR"):
    return os.environ["TFDS_DATA_DIR"]
  from tensorflow_datasets.core import constants

  return os.fspath(constants.DATA_DIR)


def _tfds_version(tfds_name: str) -> str:
  try:
    import tensorflow_datasets as tfds

    return str(tfds.builder_cls(tfds_name).VERSION)
  except Exception:  # the message must not fail; the version is only a hint
    return "<version>"


def _missing_message(name: str, spec: TfdsSpec, split: str, data_dir: str) -> str:
  tfds_name = spec.tfds_name
  version = _tfds_version(tfds_name)
  found = os.path.isdir(os.path.join(data_dir, tfds_name))
  lines = [
    f"Dataset {name!r} (TFDS {tfds_name!r}, split {split!r}) is not available in data_dir "
    f"{data_dir!r}"
    + (" (a folder for it exists but holds no usable array_record copy)." if found else "."),
    "rsjax never downloads data; it reads TFDS datasets prepared in the array_record format. "
    "To prepare one, on a machine with network access and TensorFlow run:",
    f"  tfds build {tfds_name} --data_dir=DIR --file_format=array_record",
    f"  (or: tfds.builder({tfds_name!r}, data_dir=DIR, file_format='array_record')"
    ".download_and_prepare())",
    f"then copy DIR/{tfds_name}/{version}/ (dataset_info.json, features.json, "
    f"*.array_record-*) to {os.path.join(data_dir, tfds_name, version)}/ on this machine, "
    "or pass data_dir=... (CLI: --data-dir) or set TFDS_DATA_DIR to the folder holding "
    f"{tfds_name}/.",
  ]
  if spec.note:
    lines.append(spec.note)
  lines.append("For a dataset that needs no preparation use 'mnist5k' or 'digits'.")
  return "\n".join(lines)


def load_tfds(name: str, split: str, *, data_dir: str | os.PathLike | None = None) -> TfdsDataset:
  """Opens split ``split`` of TFDS dataset ``name`` (a key of ``TFDS_DATASETS``)."""
  spec = TFDS_DATASETS[name]
  import tensorflow_datasets as tfds

  try:
    source = tfds.data_source(
      spec.tfds_name, split=split, data_dir=data_dir, download=False, try_gcs=False
    )
  except (NotImplementedError, FileNotFoundError, KeyError, AssertionError, OSError) as e:
    raise DatasetNotFoundError(
      _missing_message(name, spec, split, _resolved_data_dir(data_dir))
    ) from e
  order = None
  if _order.SIZES.get((name, split)) == len(source):  # a whole split: torchvision's order
    order = _order.torchvision_to_tfds(name, split)
  return TfdsDataset(source, spec, name=name, split=split, order=order)
