"""Derandomized smoothing in rsjax against IBM's Adversarial Robustness Toolbox 1.20.1
(``PyTorchDeRandomizedSmoothing``, ``algorithm="levine2020"``) on the same weights (issue 72,
item 5): the counts of every image, the certificates at each patch size, and both speeds in
one run.

The model is an rsjax model directory of encoded images (``rsjax train --method patch``); ART
runs its PyTorch twin (``rsjax.app.bench.torch_models.from_flax``, the logits checked equal
first). ART's base classifier votes for every class whose softmax is at least ``threshold``,
so rsjax runs ``Patch(threshold=...)`` (``--vote-threshold``). ART is not a dependency: this
runs in an environment where ``pip install adversarial-robustness-toolbox==1.20.1`` was done,
and says so and stops where it was not.
"""

from __future__ import annotations

import importlib.util
import os
import time
from typing import Any

import numpy as np

from benchmarks.measure import dump_json
from rsjax.app.bench.machine import environment


def _images(dataset: str, count: int, every: int) -> tuple[np.ndarray, np.ndarray]:
  from rsjax.app import launch

  ds = launch.open_dataset(dataset, "test", None)
  x, y = ds.get_batch(range(0, min(len(ds), count * every), every))
  return np.asarray(x, np.float32), np.asarray(y, np.int64)


def _near_threshold(apply_fn, params, x, masks, threshold: float, eps: float) -> np.ndarray:
  """``[B]``: votes of each image (over every position and class) whose softmax (rsjax's)
  lies within ``eps`` of ``threshold``: where two frameworks' float error can flip a vote."""
  import jax
  import jax.numpy as jnp

  from rsjax.ablation import encode

  out = np.zeros(len(x), np.int64)
  for m in masks:
    z = encode(jnp.asarray(x), jnp.asarray(np.broadcast_to(m, x.shape[:3])))
    p = np.asarray(jax.nn.softmax(apply_fn(params, z).astype(jnp.float32), axis=-1))
    out += (np.abs(p - threshold) < eps).sum(axis=1)
  return out


def art_patch(
  *,
  model_dir: str,
  ablation: str = "column",
  size: int = 2,
  dataset: str = "mnist5k",
  images: int = 200,
  every: int = 5,
  threshold: float = 0.3,
  batch: int = 1000,
  art_batch: int = 128,
  sizes: tuple[int, ...] = (1, 2, 3, 4, 5),
  rounds: int = 3,
  eps: float = 1e-5,
  torch_threads: int | None = None,
  json: str | None = None,
) -> dict[str, Any]:
  """Counts, certificates and certified images per second of rsjax and ART on the same
  weights (best of ``rounds``, alternated); PyTorch on ``torch_threads`` threads (default:
  every core; one is steadier on a busy machine)."""
  if importlib.util.find_spec("art") is None:
    print("ART is not installed (pip install adversarial-robustness-toolbox==1.20.1): skipped")
    return {"skipped": "art not installed"}
  import art
  import torch
  from art.estimators.certification.derandomized_smoothing import PyTorchDeRandomizedSmoothing

  from rsjax.ablation import certify_patch, encode, position_masks
  from rsjax.app.bench import Source, load_target
  from rsjax.app.bench.torch_models import check_same_logits, from_flax, to_torch_layout

  target = load_target(Source(model=model_dir))
  info = {**target.describe(), "name": os.path.basename(os.path.normpath(model_dir))}
  h, w, c2 = target.input_shape
  x, y = _images(dataset, images, every)
  twin = from_flax(target.model, (h, w, c2))
  masks = position_masks((h, w, c2 // 2), ablation, size)
  k = min(16, len(x))
  z = np.asarray(encode(x[:k], np.broadcast_to(masks[3], (k, h, w))))
  logits = check_same_logits(twin, target.apply_fn, target.params, z)
  torch.set_num_threads(torch_threads or os.cpu_count() or 1)
  smoothed = PyTorchDeRandomizedSmoothing(
    model=twin, loss=torch.nn.CrossEntropyLoss(), input_shape=(c2 // 2, h, w),
    nb_classes=target.num_classes, ablation_size=size, algorithm="levine2020",
    ablation_type=ablation, threshold=threshold, logits=True, device_type="cpu",
    verbose=False,
  )  # fmt: skip
  x_nchw = to_torch_layout(x)
  y_t = torch.from_numpy(y)

  def ours():
    cert = certify_patch(
      target.apply_fn, target.params, x, target.num_classes, ablation=ablation, size=size,
      batch=batch, threshold=threshold,
    )  # fmt: skip
    return np.asarray(cert.counts), np.asarray(cert.radius)

  def theirs():
    with torch.no_grad():
      counts = smoothed.predict(np.copy(x_nchw), batch_size=art_batch)
      certs = {m: smoothed.ablator.certify(torch.from_numpy(counts), m, y_t)[0] for m in sizes}
    return np.asarray(counts).astype(np.int64), {m: v.numpy() for m, v in certs.items()}

  ours()  # compile apart
  t = time.perf_counter()
  theirs()
  art_first = time.perf_counter() - t
  times: dict[str, list[float]] = {"rsjax": [], "art": []}
  for _ in range(rounds):
    t = time.perf_counter()
    counts, radius = ours()
    times["rsjax"].append(time.perf_counter() - t)
    t = time.perf_counter()
    art_counts, art_certs = theirs()
    times["art"].append(time.perf_counter() - t)
  differ = np.any(counts != art_counts, axis=1)
  near = _near_threshold(target.apply_fn, target.params, x, masks, threshold, eps)
  explained = differ & (near > 0)
  cert_agree = {
    str(m): int(np.sum((radius >= m) == art_certs[m])) for m in sizes
  }  # rsjax certified at m vs ART's cert at m
  rate = {k: len(x) / min(v) for k, v in times.items()}
  result = {
    "machine": environment(),
    "art_version": art.__version__,
    "torch_version": torch.__version__,
    "model": info,
    "settings": {
      "dataset": dataset,
      "images": int(len(x)),
      "every": every,
      "ablation": ablation,
      "size": size,
      "threshold": threshold,
      "batch": batch,
      "art_batch": art_batch,
      "rounds": rounds,
      "eps": eps,
      "torch_threads": torch.get_num_threads(),
    },  # fmt: skip
    "positions": int(len(masks)),
    "twin_logits": logits,
    "images_counts_differ": int(differ.sum()),
    "images_counts_differ_near_threshold": int(explained.sum()),
    "images_counts_differ_unexplained": int((differ & (near == 0)).sum()),
    "votes_differ": int(np.abs(counts - art_counts).sum()),
    "images_with_near_threshold_votes": int((near > 0).sum()),
    "certified_agree_at_size": cert_agree,
    "certified_differ": [
      {
        "image": int(i),
        "size": m,
        "rsjax_radius": int(radius[i]),
        "art": bool(art_certs[m][i]),
        "counts": counts[i].tolist(),
      }
      for m in sizes
      for i in np.flatnonzero((radius >= m) != art_certs[m])
    ],  # fmt: skip
    "certified_rsjax_at_size": {str(m): int((radius >= m).sum()) for m in sizes},
    "certified_art_at_size": {str(m): int(art_certs[m].sum()) for m in sizes},
    "clean_accuracy_rsjax": float(np.mean(np.argmax(counts, 1) == y)),
    "seconds": times,
    "art_first_call_s": art_first,
    "images_per_s": rate,
    "speedup_rsjax_over_art": rate["rsjax"] / rate["art"],
  }
  print(
    f"{len(x)} {dataset} digits, {ablation} s={size}, threshold {threshold}: counts differ on "
    f"{result['images_counts_differ']} images ({result['images_counts_differ_near_threshold']} "
    f"with a vote within {eps:g} of the threshold, {result['images_counts_differ_unexplained']}"
    f" unexplained); rsjax {rate['rsjax']:.1f} vs ART {art.__version__} {rate['art']:.1f} "
    f"certified images/s ({result['speedup_rsjax_over_art']:.2f}x)"
  )
  print(f"  certified at m (rsjax / ART): {result['certified_rsjax_at_size']} / "
        f"{result['certified_art_at_size']}")  # fmt: skip
  print(f"  twin logits: {logits}")
  dump_json(json, result)
  return result
