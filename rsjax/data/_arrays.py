"""A dataset from an array file: ``.npz`` with images and labels."""

from __future__ import annotations

import os

import numpy as np

from rsjax.data._dataset import ArrayDataset

__all__ = ["is_array_file", "load_npz"]

_X = ("x", "images", "image", "inputs")
_Y = ("y", "labels", "label", "targets")


def is_array_file(name: str) -> bool:
  """Whether a dataset name is an array file (``*.npz``) rather than a registry name."""
  return isinstance(name, str) and name.lower().endswith(".npz")


def load_npz(path: str | os.PathLike, split: str = "test") -> ArrayDataset:
  """The dataset of an ``.npz`` file.

  The file holds images under ``x`` (or ``images``, ``image``, ``inputs``), NHWC
  ``[N, H, W, C]`` (or ``[N, d]``), uint8 (divided by 255) or floating in [0, 1], and integer
  labels under ``y`` (or ``labels``, ``label``, ``targets``); optionally ``num_classes``
  (default: the largest label + 1). The dataset's name is the file's path.

  Raises:
    FileNotFoundError: no such file.
    ValueError: missing arrays, mismatched lengths, values outside [0, 1], negative labels.
  """
  path = os.fspath(path)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no array file {path!r}")
  with np.load(path, allow_pickle=False) as f:
    keys = set(f.files)
    xk = next((k for k in _X if k in keys), None)
    yk = next((k for k in _Y if k in keys), None)
    if xk is None or yk is None:
      raise ValueError(
        f"{path}: an array file needs images (one of {list(_X)}) and labels (one of "
        f"{list(_Y)}); it holds {sorted(keys)}"
      )
    x, y = f[xk], f[yk]
    num_classes = int(f["num_classes"]) if "num_classes" in keys else None
  if x.dtype == np.uint8:
    x = x.astype(np.float32) / 255.0
  elif not np.issubdtype(x.dtype, np.floating):
    raise ValueError(f"{path}: images must be uint8 or floating, got {x.dtype}")
  elif x.size and not (np.min(x) >= 0.0 and np.max(x) <= 1.0):
    raise ValueError(
      f"{path}: floating images must lie in [0, 1], got [{np.min(x):.4g}, {np.max(x):.4g}]"
    )
  if not np.issubdtype(y.dtype, np.integer) or (y.size and y.min() < 0):
    raise ValueError(f"{path}: labels must be non-negative integers, got {y.dtype}")
  if y.ndim != 1 or x.shape[0] != y.shape[0] or x.shape[0] == 0:
    raise ValueError(
      f"{path}: need images [N, ...] and labels [N], N >= 1; got {x.shape}, {y.shape}"
    )
  top = int(y.max()) + 1
  if num_classes is None:
    num_classes = top
  elif num_classes < top:
    raise ValueError(f"{path}: num_classes {num_classes} but a label {top - 1}")
  return ArrayDataset(x, y, name=path, split=split, num_classes=num_classes)
