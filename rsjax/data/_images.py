"""Decoding image files as torchvision does, and decoding them ahead in threads.

``decode(path, transform)`` is torchvision's ``pil_loader`` (``Image.open(f).convert("RGB")``:
grayscale, palette and CMYK files become RGB with PIL's own conversion) followed by the
transform on the uint8 array. ``Readahead`` decodes a dataset's next images in background
threads (PIL releases the GIL while it decodes and resizes), so a run that reads its inputs
in order finds them decoded.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

__all__ = ["CorruptImageError", "Readahead", "decode", "file_sha256"]

#: torchvision's ``IMG_EXTENSIONS`` (``torchvision.datasets.folder``), compared lowercased.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


class CorruptImageError(ValueError):
  """An image file PIL cannot decode; the message names the file."""


def decode(path: str, transform: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
  """The uint8 image of the file ``path`` after ``transform``.

  Args:
    path: an image file.
    transform: uint8 ``[H, W, 3]`` -> uint8 ``[h, w, 3]`` (e.g. resize and crop).

  Raises:
    CorruptImageError: PIL cannot read the file (the message names it).
  """
  from PIL import Image

  try:
    with open(path, "rb") as f:
      image = Image.open(f)
      rgb = np.asarray(image.convert("RGB"))
  except (OSError, SyntaxError, ValueError) as e:  # PIL's UnidentifiedImageError is an OSError
    raise CorruptImageError(f"cannot decode the image file {path!r}: {e}") from None
  return transform(rgb)


def file_sha256(path: str) -> str:
  """The SHA-256 (hex) of a file's bytes."""
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def _ahead_of(indices: np.ndarray, count: int) -> list[int]:
  """The ``count`` indices that continue ``indices`` (its last step, default 1)."""
  if len(indices) == 0:
    return []
  step = int(indices[-1] - indices[-2]) if len(indices) > 1 else 1
  step = step if step > 0 else 1
  return [int(indices[-1]) + step * (k + 1) for k in range(count)]


class Readahead:
  """Decodes images in threads, those asked for and the ones that will come next.

  ``get(indices)`` returns the decoded images of ``indices`` (uint8 ``[b, *shape]``) and
  starts decoding the ``ahead`` images that continue them (same step), so the next call of a
  run that reads in order (a ``range`` of its rows, chunk after chunk) finds them done. At
  most ``ahead`` decoded images wait: a folder is never held whole.

  Args:
    decode_one: ``decode_one(i) -> uint8 [*shape]`` for an index ``i`` in ``[0, size)``.
    size: the number of images.
    shape: the shape of one decoded image.
    threads: decoding threads (default: the CPU count, at most 8).
    ahead: images decoded ahead of the last request (default: 4 per thread, at least 64).
  """

  def __init__(self, decode_one, size: int, shape, *, threads: int | None = None, ahead=None):
    self._decode_one, self._size, self._shape = decode_one, int(size), tuple(shape)
    self._threads = int(threads or min(8, os.cpu_count() or 1))
    self._ahead = int(ahead if ahead is not None else max(64, 4 * self._threads))
    self._pending: OrderedDict[int, cf.Future] = OrderedDict()
    self._lock = threading.Lock()
    self._pool: cf.ThreadPoolExecutor | None = None

  def _submit(self, i: int) -> cf.Future:
    if self._pool is None:
      self._pool = cf.ThreadPoolExecutor(self._threads, thread_name_prefix="rsjax-decode")
    future = self._pending.pop(i, None)
    return future if future is not None else self._pool.submit(self._decode_one, i)

  def get(self, indices: np.ndarray) -> np.ndarray:
    """uint8 ``[b, *shape]``: the images of ``indices`` (1-d, in ``[0, size)``)."""
    indices = np.asarray(indices, np.int64)
    with self._lock:
      futures = [self._submit(int(i)) for i in indices]
      for i in _ahead_of(indices, self._ahead):
        if i < self._size and i not in self._pending:
          self._pending[i] = self._submit(i)
      while len(self._pending) > self._ahead:  # a run that jumped: forget the oldest
        self._pending.popitem(last=False)[1].cancel()
    out = np.empty((len(indices), *self._shape), np.uint8)
    for k, future in enumerate(futures):
      out[k] = future.result()
    return out

  def close(self) -> None:
    """Stops the threads (pending decodes are dropped)."""
    with self._lock:
      for future in self._pending.values():
        future.cancel()
      self._pending.clear()
      if self._pool is not None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = None

  def __del__(self):
    pool = getattr(self, "_pool", None)
    if pool is not None:
      pool.shutdown(wait=False, cancel_futures=True)
