"""MNIST from LeCun's IDX files (the folder torchvision's ``MNIST(root)`` keeps in ``raw/``).

The four files of the MNIST database: ``train-images-idx3-ubyte`` and
``train-labels-idx1-ubyte`` (60,000 digits), ``t10k-images-idx3-ubyte`` and
``t10k-labels-idx1-ubyte`` (10,000), each also found as ``.gz`` and with a dot before
``idx`` (``train-images.idx3-ubyte``, as some copies name them). ``find_idx`` looks in
``data_dir``, ``data_dir/raw`` and ``data_dir/MNIST/raw``. Index ``i`` is the ``i``-th digit
of the file (torchvision's order); images are uint8 ``[28, 28, 1]``.
"""

from __future__ import annotations

import gzip
import hashlib
import os

import numpy as np

from rsjax.data._dataset import Uint8Dataset
from rsjax.data._image_folder import FolderError

__all__ = ["IDX_STORAGE", "MnistIdxDataset", "find_idx"]

IDX_STORAGE = "mnist-idx"
_PREFIX = {"train": "train", "test": "t10k"}
_MAGIC = {"images": 2051, "labels": 2049}  # uint8 data, 3 or 1 dimensions


def _names(split: str, kind: str) -> list[str]:
  """The file names a copy may give ``split``'s ``kind`` (``"images"`` or ``"labels"``)."""
  dims = 3 if kind == "images" else 1
  base = [f"{_PREFIX[split]}-{kind}-idx{dims}-ubyte", f"{_PREFIX[split]}-{kind}.idx{dims}-ubyte"]
  return [n + ext for n in base for ext in ("", ".gz")]


def _file(folder: str, split: str, kind: str) -> str | None:
  """The path of ``split``'s ``kind`` file in ``folder``, or None."""
  for name in _names(split, kind):
    path = os.path.join(folder, name)
    if os.path.isfile(path):
      return path
  return None


def find_idx(data_dir: str) -> str | None:
  """The folder in (or at) ``data_dir`` holding MNIST's test or train images, or None."""
  for folder in (data_dir, os.path.join(data_dir, "raw"), os.path.join(data_dir, "MNIST", "raw")):
    if any(_file(folder, split, "images") for split in _PREFIX):
      return folder
  return None


def read_idx(path: str, kind: str) -> np.ndarray:
  """The uint8 array of an IDX file (``.gz`` or not): images ``[n, H, W]``, labels ``[n]``.

  Raises:
    FolderError: not an IDX file of ``kind`` (its magic number, its size).
  """
  opener = gzip.open if path.endswith(".gz") else open
  try:
    with opener(path, "rb") as f:
      raw = f.read()
  except (OSError, EOFError) as e:
    raise FolderError(f"{path!r} is not readable: {type(e).__name__}: {e}") from None
  dims = 3 if kind == "images" else 1
  head = 4 + 4 * dims
  if len(raw) < head or int.from_bytes(raw[:4], "big") != _MAGIC[kind]:
    raise FolderError(f"{path!r} is not an MNIST {kind} file (IDX magic {_MAGIC[kind]})")
  shape = tuple(int.from_bytes(raw[4 + 4 * k : 8 + 4 * k], "big") for k in range(dims))
  if len(raw) != head + int(np.prod(shape)):
    raise FolderError(f"{path!r}: {len(raw) - head} bytes of data for the shape {shape}")
  return np.frombuffer(raw, np.uint8, offset=head).reshape(shape)


class MnistIdxDataset(Uint8Dataset):
  """MNIST's ``train`` or ``test`` split from its IDX files (module docstring).

  Args:
    folder: the folder of the files (:func:`find_idx`).
    split: "train" or "test".
    name: as given to ``rsjax.data.load``.

  Attributes:
    storage: ``"mnist-idx"``.
    root: the folder; ``images`` uint8 ``[N, 28, 28, 1]``, ``labels`` int64 ``[N]``.
  """

  storage = IDX_STORAGE

  def __init__(self, folder: str, split: str, *, name: str = "mnist"):
    paths = {kind: _file(folder, split, kind) for kind in _MAGIC}
    missing = [_names(split, kind)[0] for kind, path in paths.items() if path is None]
    if missing:
      raise FolderError(f"the MNIST folder {folder!r} lacks {', '.join(missing)} (or .gz)")
    images = read_idx(paths["images"], "images")[..., None]
    labels = read_idx(paths["labels"], "labels").astype(np.int64)
    if len(images) != len(labels) or (labels.size and labels.max() > 9):
      raise FolderError(
        f"the MNIST folder {folder!r}: {len(images)} images and {len(labels)} labels "
        f"(labels up to {labels.max() if labels.size else None}, expected 0..9)"
      )
    super().__init__(folder, images, labels, name=name, split=split, num_classes=10)

  def image_name(self, i: int) -> str:
    """``train-images[i]`` or ``t10k-images[i]`` (whatever the copy names its file)."""
    return f"{_PREFIX[self.split]}-images[{int(i)}]"

  def image_sha256(self, i: int) -> str:
    """The SHA-256 of image ``i``'s 784 bytes as the file stores them (row-major)."""
    return hashlib.sha256(self.images[int(i)].tobytes()).hexdigest()
