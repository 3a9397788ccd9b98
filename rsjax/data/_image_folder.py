"""A class-per-subfolder image folder, read as torchvision's ``ImageFolder`` reads it.

``root/<class>/**/<image>``: the classes are the subfolders of ``root`` sorted by name
(class ``k`` is the ``k``-th), the images of a class are the files under its folder with an
image extension, walked as ``sorted(os.walk(...))`` and each folder's files sorted: index
``i`` is the ``i``-th image of torchvision's ``ImageFolder(root)``, so a run's ``--skip 100``
selects the images Cohen et al.'s code selects. Nothing is decoded when the folder is
opened: images are decoded when asked for (``rsjax.data._images.Readahead``), converted to
RGB, transformed (ImageNet: ``Resize(256)``, ``CenterCrop(224)``), uint8 then ``/ 255``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np

from rsjax.data import _images
from rsjax.data._dataset import Dataset
from rsjax.data._tfds import DatasetNotFoundError

__all__ = ["FolderError", "ImageFolderDataset", "scan"]


class FolderError(DatasetNotFoundError):
  """A dataset folder that is missing, empty or not in the layout expected (one line)."""


def _is_image(name: str) -> bool:
  return name.lower().endswith(_images.IMG_EXTENSIONS)


def _class_files(root: str, cls: str) -> list[str]:
  """The image files of class folder ``cls`` (relative to ``root``), torchvision's order."""
  files = []
  for folder, _, names in sorted(os.walk(os.path.join(root, cls), followlinks=True)):
    rel = os.path.relpath(folder, root)
    files.extend(os.path.join(rel, n).replace(os.sep, "/") for n in sorted(names) if _is_image(n))
  return files


def scan(root: str) -> tuple[list[str], list[str], np.ndarray]:
  """``(classes, files, labels)`` of the image folder ``root``.

  Returns:
    The sorted class names ``[C]``, the image paths relative to ``root`` ``[N]`` (``/``
    separated) and their int64 labels ``[N]``, in torchvision's order.

  Raises:
    FolderError: ``root`` is missing, has no class folder, has images next to its class
      folders (a mix of layouts), or a class folder holds no image (named).
  """
  if not os.path.isdir(root):
    raise FolderError(f"no image folder {root!r}")
  entries = sorted(os.scandir(root), key=lambda e: e.name)
  classes = [e.name for e in entries if e.is_dir()]
  loose = [e.name for e in entries if e.is_file() and _is_image(e.name)]
  if not classes:
    raise FolderError(
      f"the image folder {root!r} holds no class folder (expected {root}/<class>/<image>)"
    )
  if loose:
    raise FolderError(
      f"the image folder {root!r} mixes layouts: {len(loose)} images ({loose[0]!r}, ...) lie "
      "next to its class folders; put every image in the folder of its class"
    )
  files, labels = [], []
  for k, cls in enumerate(classes):
    mine = _class_files(root, cls)
    if not mine:
      raise FolderError(
        f"the class folder {os.path.join(root, cls)!r} holds no image "
        f"({', '.join(_images.IMG_EXTENSIONS)})"
      )
    files.extend(mine)
    labels.extend([k] * len(mine))
  return classes, files, np.asarray(labels, np.int64)


def _relabel(root: str, name: str, classes: list[str], all_classes: Sequence[str]) -> np.ndarray:
  """int64 ``[len(classes)]``: each folder class's position in ``all_classes``.

  Raises:
    FolderError: a class folder that is not one of ``all_classes`` (named).
  """
  where = {c: k for k, c in enumerate(all_classes)}
  unknown = [c for c in classes if c not in where]
  if unknown:
    raise FolderError(
      f"the class folder {os.path.join(root, unknown[0])!r} is not a class of {name!r} "
      f"({len(unknown)} such; {name!r} has {len(all_classes)} classes: {all_classes[0]}, ...)"
    )
  return np.asarray([where[c] for c in classes], np.int64)


class ImageFolderDataset(Dataset):
  """The images of a class-per-subfolder folder, decoded on demand, ahead, in threads.

  Args:
    root: the folder (``root/<class>/<image>``).
    transform: uint8 ``[H, W, 3]`` -> uint8 ``input_shape`` (e.g. resize and center crop).
    input_shape: the shape of one transformed image, e.g. ``(224, 224, 3)``.
    name, split: as given to ``rsjax.data.load``.
    all_classes: the class names of the dataset the name promises, in label order (e.g.
      ImageNet's 1,000 sorted WordNet ids): each class folder must be one of them and its
      label is its position there (a folder of some of ImageNet's classes keeps ImageNet's
      labels); None: the folder's own classes, label ``k`` the ``k``-th (torchvision's).
    listing: ``(classes, files, labels)`` as :func:`scan` returns them, for a folder whose
      classes are not subfolders (default: :func:`scan` of ``root``).

  Attributes:
    storage: ``"image-folder"``.
    root, classes, files, labels: the folder, its sorted class names, the image paths
      relative to ``root`` and their labels.
  """

  storage = "image-folder"

  def __init__(
    self,
    root: str,
    transform: Callable[[np.ndarray], np.ndarray],
    input_shape,
    *,
    name: str,
    split: str,
    all_classes: Sequence[str] | None = None,
    listing: tuple[list[str], list[str], np.ndarray] | None = None,
  ):
    classes, files, labels = scan(root) if listing is None else listing
    if all_classes is not None:
      labels = _relabel(root, name, classes, all_classes)[labels]
    num_classes = len(classes if all_classes is None else all_classes)
    super().__init__(name=name, split=split, num_classes=num_classes, input_shape=input_shape)
    self.root, self.classes, self.files, self.labels = root, classes, files, labels
    self._transform = transform
    self._reader = _images.Readahead(self._decode, len(files), self.input_shape)

  def __len__(self) -> int:
    return len(self.files)

  def _decode(self, i: int) -> np.ndarray:
    image = _images.decode(os.path.join(self.root, self.files[i]), self._transform)
    if image.shape != self.input_shape:
      raise _images.CorruptImageError(
        f"the image file {self.files[i]!r} in {self.root!r} is {image.shape} after decoding, "
        f"expected {self.input_shape}"
      )
    return image

  def get_uint8(self, indices) -> np.ndarray:
    """uint8 ``[b, *input_shape]``: the decoded, transformed images of ``indices``."""
    return self._reader.get(self._check_indices(indices))

  def _load(self, indices):
    x = self._reader.get(indices).astype(np.float32) / np.float32(255.0)
    return x, self.labels[indices]

  def image_name(self, i: int) -> str:
    """The path of image ``i`` relative to the folder (``<class>/<file>``)."""
    return self.files[int(i)]

  def image_sha256(self, i: int) -> str:
    """The SHA-256 of image ``i``'s file bytes."""
    return _images.file_sha256(os.path.join(self.root, self.files[int(i)]))
