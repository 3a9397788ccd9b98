"""TFDS's order of CIFAR-10 and ImageNet's validation set, against torchvision's.

TFDS shuffles a split when it prepares it: example ``key`` goes to the position of
``md5(split_name + str(key))`` among all keys of the split (``tfds.core.hashing.Hasher``
salted with the split's name; ``tfds.core.shuffle``), so TFDS's index ``j`` is not the
``j``-th image of the source files. The keys are known offline:

- ``cifar10``: the row of the image in the binary batches (``test_batch.bin`` then
  ``data_batch_1.bin`` ...), the same rows as torchvision's pickled batches; each example's
  ``id`` feature is ``"test_%05d"`` / ``"train_%05d"`` of that row;
- ``imagenet2012`` validation: the file name ``ILSVRC2012_val_%08d.JPEG`` (its ``file_name``
  feature); its class is the line of TFDS's ``validation_labels.txt`` (the sorted file
  names' labels), and torchvision's ``ImageFolder(val)`` orders by (class, file name).

``torchvision_to_tfds(name, split)`` gives, for each torchvision index ``i``, the TFDS
index that holds the same image; ``expected_key`` the feature that proves it.
"""

from __future__ import annotations

import functools
import hashlib
import os

import numpy as np

__all__ = ["SIZES", "expected_key", "torchvision_to_tfds"]

#: The splits whose TFDS order rsjax maps to torchvision's, and their sizes.
SIZES = {("cifar10", "test"): 10_000, ("cifar10", "train"): 50_000}
SIZES[("imagenet2012", "validation")] = 50_000


def _tfds_file(*parts: str) -> str:
  import importlib.util

  spec = importlib.util.find_spec("tensorflow_datasets")
  return os.path.join(list(spec.submodule_search_locations)[0], *parts)


def _val_name(k: int) -> str:
  return f"ILSVRC2012_val_{k + 1:08d}.JPEG"


@functools.cache
def _imagenet_val_order() -> np.ndarray:
  """int64 ``[50000]``: the file number (0-based) of torchvision's ``i``-th image."""
  with open(_tfds_file("datasets", "imagenet2012", "validation_labels.txt")) as f:
    wnids = [line.strip() for line in f if line.strip()]
  return np.asarray(sorted(range(len(wnids)), key=lambda k: (wnids[k], k)), np.int64)


def _keys(name: str, split: str) -> tuple[list, np.ndarray]:
  """``(keys, rows)``: TFDS's key of each source example and torchvision's index order as
  positions into ``keys``."""
  n = SIZES[(name, split)]
  if name == "cifar10":
    return list(range(n)), np.arange(n)
  return [_val_name(k) for k in range(n)], _imagenet_val_order()


@functools.cache
def torchvision_to_tfds(name: str, split: str) -> np.ndarray:
  """int64 ``[N]``: the TFDS index of torchvision's ``i``-th image of the split."""
  keys, rows = _keys(name, split)
  salt = hashlib.md5(split.encode())
  digests = []
  for key in keys:
    h = salt.copy()
    h.update(str(key).encode())
    digests.append(int(h.hexdigest(), 16))
  tfds_index = np.empty(len(keys), np.int64)
  tfds_index[sorted(range(len(keys)), key=digests.__getitem__)] = np.arange(len(keys))
  return tfds_index[rows]


def expected_key(name: str, split: str, i: int) -> tuple[str, str]:
  """``(feature, value)`` that TFDS's example of torchvision's ``i``-th image holds."""
  if name == "cifar10":
    return "id", f"{split}_{int(i):05d}"
  return "file_name", _val_name(int(_imagenet_val_order()[int(i)]))
