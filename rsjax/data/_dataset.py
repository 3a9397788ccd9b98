"""The ``Dataset`` interface: random access to (input, label) pairs.

Inputs are float32 in their natural scale (images in [0, 1], NHWC
``[N, H, W, C]``); labels are int64. A dataset knows its ``name``, ``split``,
``num_classes`` and ``input_shape`` (the shape of one input).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

__all__ = ["Dataset", "ArrayDataset", "Uint8Dataset"]

# ``arrays()`` refuses to materialize more than this (float32 bytes).
MAX_ARRAY_BYTES = 4 << 30


class Dataset:
  """Random-access dataset (base class).

  Subclasses implement ``__len__`` and ``_load(indices)``.

  Attributes:
    name: dataset name as given to ``rsjax.data.load``.
    split: split name ("train", "test", ...).
    num_classes: number of classes.
    input_shape: shape of one input, e.g. ``(28, 28, 1)``.
    extras: dataset-specific metadata (e.g. the true hyperplane of "linear").
  """

  def __init__(self, *, name: str, split: str, num_classes: int, input_shape, extras=None):
    self.name = name
    self.split = split
    self.num_classes = int(num_classes)
    self.input_shape = tuple(int(s) for s in input_shape)
    self.extras = dict(extras or {})

  def __len__(self) -> int:
    raise NotImplementedError

  def _load(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    raise NotImplementedError

  def _check_indices(self, indices) -> np.ndarray:
    idx = np.asarray(indices)
    if idx.ndim != 1 or not (np.issubdtype(idx.dtype, np.integer) or idx.size == 0):
      raise ValueError(
        f"indices must be a 1-d array of integers; got shape {idx.shape}, dtype {idx.dtype}."
      )
    idx = idx.astype(np.int64)
    n = len(self)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
      raise IndexError(
        f"indices must lie in [0, {n}) for {self.name!r} split {self.split!r}; "
        f"got min {idx.min()}, max {idx.max()}."
      )
    return idx

  def get_batch(self, indices: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and labels of ``indices``.

    Args:
      indices: 1-d integer array ``[b]`` of positions in ``[0, len(self))``.

    Returns:
      ``(x, y)``: float32 ``[b, *input_shape]`` and int64 ``[b]``.
    """
    return self._load(self._check_indices(indices))

  def __getitem__(self, i) -> tuple[np.ndarray, np.ndarray]:
    """``ds[i]`` -> ``(x [*input_shape], y [])``; slices and index arrays give batches."""
    if isinstance(i, slice):
      return self.get_batch(np.arange(len(self))[i])
    if np.ndim(i) == 0:
      i = int(i)
      if i < 0:
        i += len(self)
      x, y = self.get_batch(np.array([i]))
      return x[0], y[0]
    return self.get_batch(i)

  def arrays(self) -> tuple[np.ndarray, np.ndarray]:
    """The whole split in memory: float32 ``[N, *input_shape]`` and int64 ``[N]``.

    Raises:
      ValueError: if it would take more than 4 GiB (use ``get_batch`` or
        ``batches`` for large splits such as ImageNet).
    """
    nbytes = 4 * len(self) * math.prod(self.input_shape)
    if nbytes > MAX_ARRAY_BYTES:
      raise ValueError(
        f"{self.name!r} split {self.split!r} is {nbytes / 2**30:.1f} GiB as float32; too large "
        "for arrays(). Read it with get_batch(indices) or batches(batch_size)."
      )
    return self.get_batch(np.arange(len(self)))

  def batches(
    self, batch_size: int, *, indices: npt.ArrayLike | None = None
  ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Yields ``(x, y, ids)`` batches in order (the last one may be smaller).

    Args:
      batch_size: inputs per batch.
      indices: optional 1-d array of positions to read (default: all, in order).
        ``ids`` are these positions (use them as ``ids=`` of ``rsjax.certify``).
    """
    if int(batch_size) < 1:
      raise ValueError(f"batch_size must be >= 1; got {batch_size}.")
    idx = np.arange(len(self)) if indices is None else self._check_indices(indices)
    for start in range(0, len(idx), int(batch_size)):
      chunk = idx[start : start + int(batch_size)]
      x, y = self._load(chunk)
      yield x, y, chunk

  def __repr__(self) -> str:
    return (
      f"{type(self).__name__}(name={self.name!r}, split={self.split!r}, len={len(self)}, "
      f"num_classes={self.num_classes}, input_shape={self.input_shape})"
    )


class ArrayDataset(Dataset):
  """A dataset held in memory as NumPy arrays.

  Args:
    x: float32 ``[N, *input_shape]``.
    y: int64 ``[N]``.
    name, split, num_classes, extras: see ``Dataset``.
  """

  def __init__(self, x, y, *, name: str, split: str, num_classes: int, extras=None):
    x = np.asarray(x, dtype=np.float32)
    y = np.asarray(y, dtype=np.int64)
    if x.ndim < 2 or y.shape != (x.shape[0],):
      raise ValueError(f"x must be [N, ...] and y [N]; got {x.shape} and {y.shape}.")
    super().__init__(
      name=name, split=split, num_classes=num_classes, input_shape=x.shape[1:], extras=extras
    )
    x.flags.writeable = False
    y.flags.writeable = False
    self.x, self.y = x, y

  def __len__(self) -> int:
    return self.x.shape[0]

  def _load(self, indices):
    return self.x[indices], self.y[indices]

  def arrays(self) -> tuple[np.ndarray, np.ndarray]:
    return self.x, self.y


class Uint8Dataset(Dataset):
  """A folder's images held in memory as they are stored, uint8, read as float32 in ``[0, 1]``
  (``x / 255``): the base of the folder datasets that read a whole split at once.

  Args:
    root: the folder read.
    images: uint8 ``[N, *input_shape]`` (kept read-only).
    labels: int64 ``[N]``.
    name, split, num_classes: see ``Dataset``.
  """

  def __init__(self, root: str, images, labels, *, name: str, split: str, num_classes: int):
    super().__init__(name=name, split=split, num_classes=num_classes, input_shape=images.shape[1:])
    images.flags.writeable = False
    self.root, self.images, self.labels = root, images, labels

  def __len__(self) -> int:
    return len(self.labels)

  def get_uint8(self, indices) -> np.ndarray:
    """uint8 ``[b, *input_shape]``: the images of ``indices`` as stored."""
    return self.images[self._check_indices(indices)]

  def _load(self, indices):
    return self.images[indices].astype(np.float32) / np.float32(255.0), self.labels[indices]
