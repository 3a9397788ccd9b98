"""CIFAR-10 from torchvision's ``cifar-10-batches-py`` folder (the pickled batches).

The folder of ``https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz``: ``test_batch``
(10,000 images) and ``data_batch_1`` ... ``data_batch_5`` (train, 50,000), each a pickled
dict with ``data`` (uint8 ``[n, 3072]``, channel-major 32 x 32) and ``labels``. Index ``i``
is the ``i``-th image of torchvision's ``CIFAR10(root, train=...)``: the rows of the batch
files in their order. The pickles are read with an unpickler that builds only NumPy arrays
and plain containers (no other code runs), the uint8 images kept (30 MB per 10,000).
"""

from __future__ import annotations

import os
import pickle

import numpy as np

from rsjax.data._dataset import Uint8Dataset
from rsjax.data._image_folder import FolderError

__all__ = ["CifarBatchesDataset", "find_batches", "BATCHES_FOLDER"]

BATCHES_FOLDER = "cifar-10-batches-py"
_FILES = {"test": ("test_batch",), "train": tuple(f"data_batch_{k}" for k in range(1, 6))}
_ALLOWED = {
  ("numpy.core.multiarray", "_reconstruct"),
  ("numpy._core.multiarray", "_reconstruct"),
  ("numpy", "ndarray"),
  ("numpy", "dtype"),
  ("copy_reg", "_reconstructor"),
  ("copyreg", "_reconstructor"),
  ("__builtin__", "object"),
  ("builtins", "object"),
  ("_codecs", "encode"),  # bytes, as Python 3 pickles them at protocol 2
}


class _ArraysOnly(pickle.Unpickler):
  """An unpickler that builds NumPy arrays and containers, nothing else."""

  def find_class(self, module, name):
    if (module, name) not in _ALLOWED:
      raise pickle.UnpicklingError(f"{module}.{name} is not part of a CIFAR-10 batch")
    return super().find_class(module, name)


def find_batches(data_dir: str) -> str | None:
  """The ``cifar-10-batches-py`` folder in (or at) ``data_dir``, or None."""
  for folder in (os.path.join(data_dir, BATCHES_FOLDER), data_dir):
    if any(os.path.isfile(os.path.join(folder, f)) for f in ("test_batch", "data_batch_1")):
      return folder
  return None


def _read_batch(path: str) -> tuple[np.ndarray, np.ndarray]:
  """``(images uint8 [n, 32, 32, 3], labels int64 [n])`` of one pickled batch file."""
  try:
    with open(path, "rb") as f:
      entry = _ArraysOnly(f, encoding="latin1").load()
    entry = {k.decode() if isinstance(k, bytes) else k: v for k, v in entry.items()}
    data = np.asarray(entry["data"], np.uint8)
    labels = np.asarray(entry["labels"], np.int64)
  except (OSError, pickle.UnpicklingError, EOFError, KeyError, AttributeError, ValueError) as e:
    raise FolderError(f"{path!r} is not a CIFAR-10 batch file: {type(e).__name__}: {e}") from None
  if data.ndim != 2 or data.shape[1] != 3072 or labels.shape != (data.shape[0],):
    raise FolderError(
      f"{path!r} is not a CIFAR-10 batch file: data {data.shape}, labels {labels.shape} "
      "(expected [n, 3072] and [n])"
    )
  return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels


class CifarBatchesDataset(Uint8Dataset):
  """CIFAR-10's ``test`` or ``train`` split from the pickled batches (module docstring).

  Args:
    folder: the ``cifar-10-batches-py`` folder.
    split: "test" or "train".
    name: as given to ``rsjax.data.load``.

  Attributes:
    storage: ``"cifar-10-batches-py"``.
    root: the folder; ``images`` uint8 ``[N, 32, 32, 3]``, ``labels`` int64 ``[N]``.
  """

  storage = BATCHES_FOLDER

  def __init__(self, folder: str, split: str, *, name: str = "cifar10"):
    files = _FILES[split]
    missing = [f for f in files if not os.path.isfile(os.path.join(folder, f))]
    if missing:
      raise FolderError(
        f"the CIFAR-10 folder {folder!r} lacks {', '.join(missing)} of its {split!r} split"
      )
    parts = [_read_batch(os.path.join(folder, f)) for f in files]
    self._names = [(f, len(p[1])) for f, p in zip(files, parts, strict=True)]
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    if labels.size and (labels.min() < 0 or labels.max() > 9):
      raise FolderError(f"the CIFAR-10 folder {folder!r} has labels outside 0..9")
    super().__init__(folder, images, labels, name=name, split=split, num_classes=10)

  def image_name(self, i: int) -> str:
    """``<batch file>[<row>]`` of image ``i``."""
    i = int(i)
    for f, n in self._names:
      if i < n:
        return f"{f}[{i}]"
      i -= n
    raise IndexError(i)

  def image_sha256(self, i: int) -> str:
    """The SHA-256 of image ``i``'s 3072 bytes as the batch stores them (channel-major)."""
    import hashlib

    return hashlib.sha256(self.images[int(i)].transpose(2, 0, 1).tobytes()).hexdigest()
