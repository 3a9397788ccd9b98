"""Issue 70: how fast an ImageNet image folder decodes, against how fast the engine certifies.

A folder of ``images`` JPEGs (the 10 real ImageNet JPEGs of ``tests/data/foolbox``, copied
round-robin into ``<wnid>/`` folders of ImageNet-1k, so its files are real photographs of
ImageNet's sizes: 512 x 512 and 1024 x 683) is read through ``rsjax.data.load("imagenet2012",
...)`` as a run reads it: in order, ``chunk`` indices per call, the decode (PIL, RGB,
``Resize(256)``, ``CenterCrop(224)``, ``/ 255``) in the dataset's background threads. The
rate is images per second, the median of ``rounds`` passes over a new dataset each (nothing
cached), for each thread count of ``threads``.

The engine's rate is ``rsjax bench``'s seconds per image at N for the same network (a JSON it
wrote, ``engine_json``): images per second = 1 / that. The ratio says how many times faster
the folder is read than the engine certifies.
"""

from __future__ import annotations

import json as jsonlib
import os
import shutil
import statistics
import tempfile
import time

import numpy as np

__all__ = ["decode_rate"]

_HERE = os.path.dirname(os.path.abspath(__file__))
_IMAGES = os.path.join(os.path.dirname(_HERE), "tests", "data", "foolbox")


def _folder(root: str, images: int) -> str:
  """``root/val/<wnid>/<k>_<file>``: ``images`` copies of the real JPEGs; returns ``root``."""
  from rsjax import data

  wnids = data.imagenet_wnids()
  files = sorted(f for f in os.listdir(_IMAGES) if f.startswith("imagenet_"))
  for k in range(images):
    f = files[k % len(files)]
    folder = os.path.join(root, "val", wnids[int(f[:-4].split("_")[-1])])
    os.makedirs(folder, exist_ok=True)
    shutil.copy(os.path.join(_IMAGES, f), os.path.join(folder, f"{k:06d}_{f}"))
  return root


def _one_pass(root: str, threads: int, chunk: int) -> float:
  """Images per second of one in-order pass over a newly opened folder."""
  from rsjax import data

  ds = data.load("imagenet2012", "validation", data_dir=root)
  ds._reader._threads = threads
  t0 = time.perf_counter()
  for start in range(0, len(ds), chunk):
    ds.get_batch(np.arange(start, min(start + chunk, len(ds))))
  seconds = time.perf_counter() - t0
  ds._reader.close()
  return len(ds) / seconds


def decode_rate(
  images: int = 400,
  chunk: int = 10,
  threads: tuple[int, ...] = (1, 2),
  rounds: int = 3,
  engine_json: str | None = None,
  json: str | None = None,
) -> dict:
  """Decoded images per second against the engine's certified images per second.

  Args:
    images: JPEGs in the folder.
    chunk: indices per ``get_batch`` call (a run's inputs per call).
    threads: decoding thread counts measured.
    rounds: passes per thread count (the median is reported).
    engine_json: an ``rsjax bench --json`` file of the network (its seconds per image at N).
    json: where to write the result.

  Returns:
    ``{"decode": {threads: images/s}, "engine": {...}, "ratio": ...}``.
  """
  root = tempfile.mkdtemp(prefix="rsjax-decode-")
  try:
    _folder(root, images)
    rates = {
      str(t): statistics.median(_one_pass(root, t, chunk) for _ in range(rounds)) for t in threads
    }
  finally:
    shutil.rmtree(root, ignore_errors=True)
  out = {"images": images, "chunk": chunk, "rounds": rounds, "decode_images_per_s": rates}
  out["load_avg_1m"] = os.getloadavg()[0]
  if engine_json:
    with open(engine_json) as f:
      bench = jsonlib.load(f)
    run = bench["results"][0]
    per_image = float(run["seconds_per_image"])
    out["engine"] = {
      "model": bench["model"]["name"], "n": bench["target_n"], "n0": bench["n0"],
      "batch": run["batch"], "samples_per_s_median": run["samples_per_s_median"],
      "seconds_per_image": per_image, "load_avg_1m": bench["machine"].get("load_avg_1m"),
    }  # fmt: skip
    out["engine_images_per_s"] = 1.0 / per_image
    out["decode_over_engine"] = {t: r * per_image for t, r in rates.items()}
  if json:
    with open(json, "w") as f:
      jsonlib.dump(out, f, indent=1)
      f.write("\n")
  return out
