"""Which storage a ``data_dir`` holds, and the digest that binds the images a run read.

``mnist``, ``cifar10`` and ``imagenet2012`` are read from TFDS's prepared files or from the
folders PyTorch users keep: ``open_folder`` looks in ``data_dir`` for

- ``mnist``: LeCun's four IDX files (``t10k-images-idx3-ubyte`` ..., or ``.gz``) in
  ``data_dir``, ``raw/`` or ``MNIST/raw/`` (torchvision's layout; ``rsjax.data._mnist_idx``);
- ``cifar10``: ``cifar-10-batches-py/`` (or ``data_dir`` is that folder): torchvision's
  pickled batches (``rsjax.data._cifar_batches``);
- ``imagenet2012``: ``val/`` (or ``validation/``) for the validation split, ``train/`` for
  train, each ``<wnid>/<image>`` (``rsjax.data._image_folder``), or ``data_dir`` itself when
  its subfolders are all WordNet ids (``n01440764``, ...);

and returns None where there is none (the caller reads TFDS). A ``data_dir`` that holds
both a folder and TFDS's copy of the same dataset is refused: which one a run read would
depend on a rule nobody sees.

``images_sha256(ds, indices)`` is the SHA-256 of one line per image, ``index<TAB>name<TAB>
label<TAB>sha256 of its bytes``, in the order of ``indices``: the record of a run read from
a folder keeps it, and ``verify``/``audit`` recompute it from the folder they are given.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from collections.abc import Iterable

import numpy as np

from rsjax.data._cifar_batches import CifarBatchesDataset, find_batches
from rsjax.data._dataset import Dataset
from rsjax.data._image_folder import FolderError, ImageFolderDataset
from rsjax.data._mnist_idx import IDX_STORAGE, MnistIdxDataset, find_idx

__all__ = ["STORAGES", "images_sha256", "is_image_folder", "open_folder", "open_image_folder"]

#: The storages of folder datasets (their ``storage`` attribute).
STORAGES = ("cifar-10-batches-py", "image-folder", IDX_STORAGE)

_WNID = re.compile(r"^n\d{8}$")
_IMAGENET_SPLIT_FOLDERS = {"validation": ("val", "validation"), "train": ("train",)}


def _refuse_mix(data_dir: str, folder: str, tfds_name: str) -> None:
  """Refuses a ``data_dir`` holding both ``folder`` and TFDS's ``tfds_name`` copy."""
  if os.path.isdir(os.path.join(data_dir, tfds_name)):
    raise FolderError(
      f"data_dir {data_dir!r} holds both {folder!r} and TFDS's {tfds_name}/: a mix of layouts; "
      "give the folder itself (or a data_dir with only one of them)"
    )


def _imagenet_folder(data_dir: str, split: str) -> str | None:
  """The ImageNet image folder of ``split`` in (or at) ``data_dir``, or None."""
  for sub in _IMAGENET_SPLIT_FOLDERS.get(split, ()):
    folder = os.path.join(data_dir, sub)
    if os.path.isdir(folder):
      return folder
  dirs = [e.name for e in os.scandir(data_dir) if e.is_dir()]
  if dirs and all(_WNID.match(d) for d in dirs):
    return data_dir
  return None


def open_folder(name: str, split: str, data_dir, transform=None) -> Dataset | None:
  """The folder dataset of ``name`` (``"mnist"``, ``"cifar10"`` or ``"imagenet2012"``) and
  ``split`` (TFDS's name: ``"validation"``, not its alias) in ``data_dir``, or None (none there).

  Args:
    transform: for ImageNet, uint8 ``[H, W, 3]`` -> uint8 ``[224, 224, 3]``.

  Raises:
    FolderError: a mix of layouts, a slice of a split (``"test[:500]"``: TFDS's syntax), or
      a folder that is not what its dataset needs (see the folder datasets).
  """
  if data_dir is None or name not in ("mnist", "cifar10", "imagenet2012"):
    return None
  data_dir = os.fspath(data_dir)
  if not os.path.isdir(data_dir):
    return None
  if name == "mnist":
    folder = find_idx(data_dir)
  elif name == "cifar10":
    folder = find_batches(data_dir)
  else:
    folder = _imagenet_folder(data_dir, split.split("[")[0])
  if folder is None:
    return None
  if "[" in split:
    raise FolderError(
      f"split {split!r}: slices are TFDS's; the folder {folder!r} is read whole, select rows "
      "with start/stop/skip (CLI: --start, --max, --skip)"
    )
  if folder != data_dir:
    _refuse_mix(data_dir, os.path.basename(folder), name)
  if name == "mnist":
    return MnistIdxDataset(folder, split, name=name)
  if name == "cifar10":
    return CifarBatchesDataset(folder, split, name=name)
  listing = _flat_imagenet_val(folder) if split == "validation" else None
  return ImageFolderDataset(
    folder,
    transform,
    (224, 224, 3),
    name=name,
    split=split,
    all_classes=imagenet_wnids(),
    listing=listing,
  )


_VAL_FILE = re.compile(r"^ILSVRC2012_val_(\d{8})\.JPEG$")


def _flat_imagenet_val(folder: str) -> tuple[list[str], list[str], np.ndarray] | None:
  """The listing of ImageNet's validation images as the tar holds them, all 50,000 in one
  folder (``ILSVRC2012_val_00000001.JPEG`` ...), in torchvision's order of the same images
  sorted into class folders: by (WordNet id, file name), the WordNet id of each file read
  from TFDS's ``validation_labels.txt``; None for a folder of class folders.

  Raises:
    FolderError: a flat folder without all 50,000 files (the labels are those of the set).
  """
  entries = list(os.scandir(folder))
  if any(e.is_dir() for e in entries) or not entries:
    return None
  names = sorted(e.name for e in entries if _VAL_FILE.match(e.name))
  if len(names) != 50_000 or len(names) != len(entries):
    raise FolderError(
      f"{folder!r} holds no class folder and is not ImageNet's flat validation set (the 50,000 "
      f"ILSVRC2012_val_*.JPEG of the tar; {len(names)} of {len(entries)} entries are): sort "
      "it into <wnid>/ folders or give all of it"
    )
  with open(_tfds_file("datasets", "imagenet2012", "validation_labels.txt")) as f:
    wnids = [line.strip() for line in f if line.strip()]
  classes = sorted(set(wnids))
  where = {w: k for k, w in enumerate(classes)}
  order = sorted(range(len(names)), key=lambda k: (wnids[k], names[k]))
  labels = np.asarray([where[wnids[k]] for k in order], np.int64)
  return classes, [names[k] for k in order], labels


def _tfds_file(*parts: str) -> str:
  """A data file of the installed ``tensorflow_datasets`` package (without importing it)."""
  import importlib.util

  spec = importlib.util.find_spec("tensorflow_datasets")
  return os.path.join(list(spec.submodule_search_locations)[0], *parts)


@functools.cache
def imagenet_wnids() -> tuple[str, ...]:
  """ImageNet-1k's 1,000 WordNet ids, sorted: label ``k`` is the ``k``-th (TFDS's
  ``imagenet2012`` labels file, read without importing TFDS; torchvision's order too)."""
  with open(_tfds_file("datasets", "imagenet2012", "labels.txt")) as f:
    wnids = tuple(line.strip() for line in f if line.strip())
  assert len(wnids) == 1000 and list(wnids) == sorted(wnids), "TFDS's ImageNet labels changed"
  return wnids


def is_image_folder(name: str) -> bool:
  """Whether a dataset name is the path of a folder (any class-per-subfolder image folder)."""
  return isinstance(name, str) and os.path.isdir(name)


def _identity(image):
  return image


def open_image_folder(root: str, split: str = "test", transform=None) -> ImageFolderDataset:
  """Any class-per-subfolder image folder ``root/<class>/<image>``, its classes its own
  (sorted; torchvision's ``ImageFolder``), named by its path (``split`` only recorded).

  Images are read at their own size when the first image's shorter side is below 224 (all
  must then have its size: CIFAR-10 or MNIST as image files), else as ImageNet's: ``transform``
  (``Resize(256)``, ``CenterCrop(224)``).
  """
  from PIL import Image

  from rsjax.data._image_folder import scan

  _, files, _ = scan(root)
  with Image.open(os.path.join(root, files[0])) as first:
    w, h = first.size
  if min(w, h) < 224:
    return ImageFolderDataset(root, _identity, (h, w, 3), name=root, split=split)
  return ImageFolderDataset(root, transform, (224, 224, 3), name=root, split=split)


def images_sha256(ds: Dataset, indices: Iterable[int]) -> str | None:
  """The SHA-256 binding the images ``indices`` of a folder dataset (module docstring), or
  None for a dataset of another storage."""
  if getattr(ds, "storage", None) not in STORAGES:
    return None
  h = hashlib.sha256()
  for i in indices:
    i = int(i)
    line = f"{i}\t{ds.image_name(i)}\t{int(ds.labels[i])}\t{ds.image_sha256(i)}\n"
    h.update(line.encode())
  return h.hexdigest()
