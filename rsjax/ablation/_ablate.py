"""Ablated inputs on device: the paper's encoding, the kept bands and blocks, the kept pixels
of randomized ablation, and the class counts of a classifier over them.

The encoding is derandomized smoothing's as ART 1.20's ``levine2020`` ablators implement it
(Levine and Feizi, NeurIPS 2020; used here for their randomized ablation too): an image
``x [H, W, C]`` in [0, 1] becomes ``[H, W, 2C]``, the channels ``x`` then ``1 - x`` at a kept
pixel and 0 in every channel at an ablated one, so the classifier can tell an ablated pixel
from any value (a kept black pixel is ``(0, 1)``). MNIST has 2 channels, CIFAR-10 6.

Band positions wrap around the image, as in the paper: the band of width ``s`` at column
``p`` keeps columns ``p, p + 1, ..., p + s - 1`` (mod ``W``); the block at ``(r, c)`` keeps
rows ``r..r + s - 1`` and columns ``c..c + s - 1``, both mod the image's size.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from rsjax.ablation._check import ENCODING
from rsjax.engine import precision as precision_lib
from rsjax.engine.step import cast_floating

__all__ = [
  "ENCODING",
  "encode",
  "encoded_shape",
  "kept_pixels",
  "l0_counts",
  "padded_steps",
  "patch_counts",
  "position_masks",
  "votes_of_logits",
]


def encoded_shape(input_shape: tuple[int, ...]) -> tuple[int, ...]:
  """``(H, W, C) -> (H, W, 2C)``: the input shape of a classifier of encoded images."""
  if len(input_shape) != 3:
    raise ValueError(f"input_shape must be (H, W, C) images, got {tuple(input_shape)}")
  h, w, c = (int(d) for d in input_shape)
  return (h, w, 2 * c)


def encode(x: jax.Array, keep: jax.Array) -> jax.Array:
  """The encoded images ``[..., H, W, 2C]`` of ``x [..., H, W, C]`` with the pixels
  ``keep [..., H, W]`` (bool or 0/1) kept."""
  k = keep.astype(x.dtype)[..., None]
  return jnp.concatenate([x * k, (1.0 - x) * k], axis=-1)


def _band(size: int, start: int, width: int) -> np.ndarray:
  """``[size]`` bool: the indices ``start .. start + width - 1`` mod ``size``."""
  out = np.zeros(size, bool)
  out[(start + np.arange(min(width, size))) % size] = True
  return out


def position_masks(shape: tuple[int, ...], ablation: str, size: int) -> np.ndarray:
  """Every kept region of derandomized smoothing: ``[P, H, W]`` bool, in position order.

  Args:
    shape: the image shape ``(H, W, C)``.
    ablation: ``"column"`` (``P = W`` bands of ``size`` columns), ``"row"`` (``P = H``) or
      ``"block"`` (``P = H * W`` blocks of ``size x size``, row-major by their corner).
    size: ``s``, the width of a band or the side of a block (>= 1).
  """
  h, w = int(shape[0]), int(shape[1])
  if ablation == "column":
    return np.stack([np.broadcast_to(_band(w, p, size), (h, w)) for p in range(w)])
  if ablation == "row":
    return np.stack([np.broadcast_to(_band(h, p, size)[:, None], (h, w)) for p in range(h)])
  if ablation == "block":
    rows = [_band(h, r, size) for r in range(h)]
    cols = [_band(w, c, size) for c in range(w)]
    return np.stack([rows[r][:, None] & cols[c][None, :] for r in range(h) for c in range(w)])
  raise ValueError(f"ablation must be 'column', 'row' or 'block', got {ablation!r}")


def _votes(
  apply_fn: Callable, params, z: jax.Array, num_classes: int, dtype, threshold=None
) -> jax.Array:
  """``[b, C]`` int32 votes of each encoded image ``z [b, ...]``, the classifier run in
  ``dtype`` (None: float32): one-hot of the top class (the smaller class on equal logits, as
  ``argmax``), or with a ``threshold`` every class whose softmax is at least it (none, one or
  several: the base classifier of ART's ``levine2020``)."""
  logits = apply_fn(params, z if dtype is None else z.astype(dtype))
  return votes_of_logits(logits, z.shape[0], num_classes, threshold, tuple(z.shape[1:]))


def votes_of_logits(logits, b: int, num_classes: int, threshold=None, shape=()) -> jax.Array:
  """``[b, C]`` int32 votes of ``logits [b, C]`` (as :func:`_votes`); ``shape`` names the
  encoded inputs in the error."""
  if logits.shape != (b, num_classes):
    raise ValueError(
      f"apply_fn returned logits of shape {logits.shape} for {b} encoded inputs "
      f"{shape}; expected [{b}, num_classes={num_classes}] (the "
      "classifier must take the encoded images, 2 x the channels)"
    )
  if threshold is not None:
    return (jax.nn.softmax(logits.astype(jnp.float32), axis=-1) >= threshold).astype(jnp.int32)
  return jax.nn.one_hot(jnp.argmax(logits, axis=-1), num_classes, dtype=jnp.int32)


@functools.partial(jax.jit, static_argnums=(0, 4, 5, 6))
def _patch_counts(apply_fn, params, x, masks, num_classes, dtype, threshold):
  """Counts ``[B, C]`` of ``x [B, H, W, C]`` over ``masks [steps, p, H, W]`` (padding: no
  kept pixel and ``valid`` false; ``valid [steps, p]``)."""
  masks, valid = masks

  def step(acc, mv):
    m, v = mv  # [p, H, W], [p]
    b, p = x.shape[0], m.shape[0]
    z = encode(x[:, None], m[None]).reshape((b * p, *x.shape[1:-1], 2 * x.shape[-1]))
    votes = _votes(apply_fn, params, z, num_classes, dtype, threshold)
    votes = votes.reshape((b, p, num_classes))
    return acc + jnp.sum(votes * v[None, :, None].astype(jnp.int32), axis=1), None

  init = jnp.zeros((x.shape[0], num_classes), jnp.int32)
  return jax.lax.scan(step, init, (masks, valid))[0]


def padded_steps(masks: np.ndarray, per_step: int) -> tuple[np.ndarray, np.ndarray]:
  """``masks [P, H, W]`` padded to ``[steps, per_step, H, W]`` and which are real."""
  p = masks.shape[0]
  per_step = max(1, min(int(per_step), p))
  steps = -(-p // per_step)
  pad = steps * per_step - p
  padded = np.concatenate([masks, np.zeros((pad, *masks.shape[1:]), bool)])
  valid = np.arange(steps * per_step) < p
  return padded.reshape((steps, per_step, *masks.shape[1:])), valid.reshape((steps, per_step))


def patch_counts(
  apply_fn: Callable,
  params,
  x: np.ndarray,
  masks: np.ndarray,
  num_classes: int,
  batch: int = 1000,
  precision: str = "float32",
  threshold: float | None = None,
) -> np.ndarray:
  """The exact class counts of derandomized smoothing: for each image, the votes of the
  classifier on its encoding at every kept region.

  Args:
    apply_fn: ``apply_fn(params, z) -> logits`` on encoded images ``[b, H, W, 2C]``.
    params: its parameters.
    x: ``[B, H, W, C]`` images in [0, 1].
    masks: ``[P, H, W]`` bool, every kept region (:func:`position_masks`).
    num_classes: C.
    batch: about this many forward passes per step (speed only: the counts are exact).
    precision: the classifier's precision (``rsjax.engine.precision``: its matmul
      precision in force when traced, and its compute dtype).
    threshold: None (each region votes its top class) or every class whose softmax is at
      least this votes.

  Returns:
    ``[B, C]`` int64 counts, each row summing to ``P`` (with a threshold: each count at most
    ``P``).
  """
  x = np.asarray(x, np.float32)
  per_step = max(1, int(batch) // max(1, x.shape[0]))
  steps = padded_steps(np.asarray(masks, bool), per_step)
  dtype = precision_lib.compute_dtype(precision)
  with precision_lib.context(precision):
    out = _patch_counts(
      apply_fn, cast_floating(params, dtype), jnp.asarray(x), steps, int(num_classes), dtype,
      None if threshold is None else float(threshold),
    )  # fmt: skip
  return np.asarray(out, np.int64)


def kept_pixels(key: jax.Array, d: int, k: int) -> jax.Array:
  """``[d]`` bool, ``k`` of the ``d`` pixels kept, uniformly over the ``C(d, k)`` subsets
  (``jax.random.permutation`` of ``key``)."""
  chosen = jax.random.permutation(key, d)[:k]
  return jnp.zeros(d, bool).at[chosen].set(True)


@functools.partial(jax.jit, static_argnums=(0, 5, 6, 7, 8))
def _l0_counts(apply_fn, params, key, x, ids, num, keep, num_classes, dtype):
  """Counts ``[B, C]`` of ``num = (n, per_step)``: ``n`` ablations per image drawn
  ``per_step`` a step (the last step's extra samples do not count)."""
  b, h, w = x.shape[0], x.shape[1], x.shape[2]
  per_step = num[1]

  def masks(j):  # [B, per_step, H, W]: sample j of image ids[i] from fold_in(fold_in(key, i), j)
    def one(i, jj):
      return kept_pixels(jax.random.fold_in(jax.random.fold_in(key, i), jj), h * w, keep)

    return jax.vmap(lambda i: jax.vmap(lambda jj: one(i, jj))(j))(ids).reshape((b, -1, h, w))

  def step(acc, c):
    j = c * per_step + jnp.arange(per_step, dtype=jnp.uint32)
    m = masks(j)
    z = encode(x[:, None], m).reshape((b * per_step, h, w, 2 * x.shape[-1]))
    votes = _votes(apply_fn, params, z, num_classes, dtype).reshape((b, per_step, num_classes))
    valid = (j < num[0]).astype(jnp.int32)
    return acc + jnp.sum(votes * valid[None, :, None], axis=1), None

  init = jnp.zeros((b, num_classes), jnp.int32)
  steps = jnp.arange(-(-num[0] // per_step), dtype=jnp.uint32)
  return jax.lax.scan(step, init, steps)[0]


def l0_counts(
  apply_fn: Callable,
  params,
  key: jax.Array,
  x: np.ndarray,
  ids: np.ndarray,
  num: int,
  keep: int,
  num_classes: int,
  batch: int = 1000,
  precision: str = "float32",
) -> np.ndarray:
  """Class counts of ``num`` randomized ablations of each image (``keep`` pixels kept).

  Sample ``j`` of the image with dataset index ``i`` keeps the pixels
  :func:`kept_pixels` draws from ``fold_in(fold_in(key, i), j)``, as every draw of rsjax:
  the counts depend on the key, the index and the model, not on ``batch``.

  Args:
    apply_fn: ``apply_fn(params, z) -> logits`` on encoded images ``[b, H, W, 2C]``.
    params: its parameters.
    key: the pass's key.
    x: ``[B, H, W, C]`` images in [0, 1].
    ids: ``[B]`` dataset indices.
    num: ablations per image.
    keep: ``k``, pixels kept of the ``H * W``.
    num_classes: C.
    batch: about this many forward passes per step (speed only).
    precision: the classifier's precision (as :func:`patch_counts`').

  Returns:
    ``[B, C]`` int64 counts, each row summing to ``num``.
  """
  x = np.asarray(x, np.float32)
  per_step = max(1, min(int(num), int(batch) // max(1, x.shape[0])))
  ids = jnp.asarray(np.asarray(ids, np.uint32))
  dtype = precision_lib.compute_dtype(precision)
  shape = ((int(num), per_step), int(keep), int(num_classes), dtype)
  with precision_lib.context(precision):
    out = _l0_counts(apply_fn, cast_floating(params, dtype), key, jnp.asarray(x), ids, *shape)
  return np.asarray(out, np.int64)
