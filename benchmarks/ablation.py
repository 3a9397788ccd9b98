"""Derandomized smoothing with a ViT (issue 72, item 3): token dropping (Salman et al., CVPR
2022) against the full encoded image, the same model and images, side by side in one run.

Arms, each a certification of the same images (every band position's vote, then the patch
certificate), alternated round by round so that load from other processes hits all three:

* ``full``: the plain ViT on the full encoded image (``rsjax.ablation.patch_counts``), what
  ``rsjax certify --method patch`` runs with any model;
* ``masked``: the same ViT on the full encoded image with every token that holds no kept pixel
  masked out of attention (``MaskedApply``): the classifier whose votes token dropping equals;
* ``dropped``: only the kept tokens through the transformer (``token_counts``).

The model has random weights (the timing does not depend on them); the images are MNIST-shaped
uniform noise of a fixed seed.
"""

from __future__ import annotations

import time
from typing import Any

import jax
import numpy as np
from flax import nnx

from benchmarks.measure import dump_json
from rsjax import ablation as ablate
from rsjax.app.bench.machine import environment
from rsjax.models import VisionTransformer, ViTConfig, to_apply_fn


def _model(image: int, channels: int, patch: int, vit: dict, classes: int, seed: int):
  cfg = ViTConfig(
    image_size=image, patch_size=patch, num_channels=2 * channels, num_labels=classes,
    mean=(0.5,) * 2 * channels, std=(0.5,) * 2 * channels, **vit,
  )  # fmt: skip
  model = VisionTransformer(cfg, rngs=nnx.Rngs(seed))
  rng = np.random.default_rng(seed)
  for _path, var in nnx.iter_graph(model):  # the zero-initialized embeddings: random, so
    if isinstance(var, nnx.Param) and not np.any(np.asarray(var[...])):  # votes vary
      var[...] = rng.normal(0, 0.5, var[...].shape).astype(np.float32)
  return model


def _certify(counts_fn, x, ablation, size):
  counts = counts_fn(x)
  radius = ablate.patch_radius(counts, ablation, size, x.shape[1:])
  return counts, radius


def token_dropping(
  *,
  image: int = 28,
  channels: int = 1,
  patch: int = 4,
  ablation: str = "column",
  size: int = 4,
  images: int = 16,
  classes: int = 10,
  rounds: int = 3,
  batch: int = 512,
  vit: dict | None = None,
  seed: int = 0,
  json: str | None = None,
) -> dict[str, Any]:
  """Certified images per second of the three arms (best and median of ``rounds``), their
  counts compared, the tokens each position keeps."""
  vit = vit or {
    "hidden_size": 192, "num_hidden_layers": 6, "num_attention_heads": 3,
    "intermediate_size": 768, "layer_norm_eps": 1e-6,
  }  # fmt: skip
  model = _model(image, channels, patch, vit, classes, seed)
  x = np.random.default_rng(seed + 1).uniform(0, 1, (images, image, image, channels))
  x = x.astype(np.float32)
  masks = ablate.position_masks(x.shape[1:], ablation, size)
  tokens, valid = ablate.position_tokens(masks, patch)
  plain_fn, variables = to_apply_fn(model)
  masked_fn, _ = ablate.to_masked_apply(model)
  token_fn, _ = ablate.to_token_apply(model)
  arms = {
    "full": lambda v: ablate.patch_counts(plain_fn, variables, v, masks, classes, batch),
    "masked": lambda v: ablate.patch_counts(masked_fn, variables, v, masks, classes, batch),
    "dropped": lambda v: ablate.token_counts(token_fn, variables, v, masks, patch, classes, batch),
  }
  compile_s, out = {}, {}
  for name, fn in arms.items():  # compile (and warm) apart
    t = time.perf_counter()
    out[name] = _certify(fn, x, ablation, size)
    compile_s[name] = time.perf_counter() - t
  times = {name: [] for name in arms}
  for _ in range(rounds):
    for name, fn in arms.items():
      t = time.perf_counter()
      counts, radius = _certify(fn, x, ablation, size)
      jax.block_until_ready(counts)
      times[name].append(time.perf_counter() - t)
      assert np.array_equal(counts, out[name][0]), f"{name}: counts changed between rounds"
  rate = {n: images / min(ts) for n, ts in times.items()}
  result = {
    "machine": environment(),
    "settings": {
      "image": image,
      "channels": channels,
      "patch": patch,
      "ablation": ablation,
      "size": size,
      "images": images,
      "classes": classes,
      "rounds": rounds,
      "batch": batch,
      "vit": vit,
      "seed": seed,
    },  # fmt: skip
    "positions": int(len(masks)),
    "tokens_full": int((image // patch) ** 2),
    "tokens_kept_max": int(tokens.shape[1]),
    "tokens_kept_mean": float(valid.sum(axis=1).mean()),
    "compile_s": compile_s,
    "seconds": times,
    "images_per_s": rate,
    "images_per_s_median": {n: images / float(np.median(ts)) for n, ts in times.items()},
    "speedup_dropped_over_full": rate["dropped"] / rate["full"],
    "speedup_dropped_over_masked": rate["dropped"] / rate["masked"],
    "counts_dropped_equal_masked": bool(np.array_equal(out["dropped"][0], out["masked"][0])),
    "images_counts_differ_dropped_masked": int(
      np.any(out["dropped"][0] != out["masked"][0], axis=1).sum()
    ),
    "images_counts_differ_dropped_full": int(
      np.any(out["dropped"][0] != out["full"][0], axis=1).sum()
    ),
    "top_share_mean": float((out["dropped"][0].max(axis=1) / len(masks)).mean()),
    "classes_voted": int((out["dropped"][0].sum(axis=0) > 0).sum()),
    "radii_equal_dropped_masked": bool(np.array_equal(out["dropped"][1], out["masked"][1])),
  }
  print(
    f"ViT {vit['hidden_size']}x{vit['num_hidden_layers']}, {image}x{image}, patch {patch}, "
    f"{ablation} s={size}: {len(masks)} positions, {tokens.shape[1]} of "
    f"{result['tokens_full']} tokens kept at most"
  )
  for n in arms:
    print(f"  {n:8s} {rate[n]:8.2f} certified images/s (best of {rounds}), compile "
          f"{compile_s[n]:.1f} s")  # fmt: skip
  print(
    f"  dropped / full {result['speedup_dropped_over_full']:.2f}x, dropped / masked "
    f"{result['speedup_dropped_over_masked']:.2f}x; counts dropped == masked: "
    f"{result['counts_dropped_equal_masked']} ({result['images_counts_differ_dropped_masked']} "
    f"images differ; against the plain full image: {result['images_counts_differ_dropped_full']})"
  )
  print(f"  top class's share of the votes {result['top_share_mean']:.2f} on average, "
        f"{result['classes_voted']} classes voted")  # fmt: skip
  dump_json(json, result)
  return result
