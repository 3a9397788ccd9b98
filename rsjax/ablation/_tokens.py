"""Token dropping for derandomized smoothing with a ViT (Salman, Jain, Wong and Madry,
"Certified Patch Robustness via Smoothed Vision Transformers", CVPR 2022): at each band or
block position only the patch tokens that hold a kept pixel (and the [CLS] token, with their
position embeddings) go through the transformer, instead of the whole encoded image.

What the counts equal: the votes of the dropped ViT are those of the **same** ViT on the full
encoded image with every token that holds no kept pixel masked out of each attention's keys
(and of its mean pooling, for BEiT), up to float error (the patch embedding as a product
instead of a convolution, shorter softmax sums). They are **not** the votes of the plain ViT
on the full encoded image: there the all-ablated tokens are still attended to, and their
embedding (the projection's bias plus their position embedding) moves the logits. A model
trained on dropped tokens is certified with dropped tokens; each position's vote depends only
on the pixels of its kept region, so the patch certificate holds for it as for any base
classifier.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rsjax.ablation._ablate import encode, padded_steps, votes_of_logits
from rsjax.engine import precision as precision_lib
from rsjax.engine.step import cast_floating

__all__ = [
  "MaskedApply",
  "TokenApply",
  "kept_tokens",
  "position_tokens",
  "to_masked_apply",
  "to_token_apply",
  "token_counts",
]


def kept_tokens(masks: np.ndarray, patch: int) -> np.ndarray:
  """``[P, g*g]`` bool: the patch tokens (row-major) holding at least one kept pixel of each
  region ``masks [P, H, W]`` (``patch`` divides ``H`` and ``W``)."""
  masks = np.asarray(masks, bool)
  n, h, w = masks.shape
  if patch < 1 or h % patch or w % patch:
    raise ValueError(f"patch {patch} must divide the image sides {h}x{w}")
  g_h, g_w = h // patch, w // patch
  return masks.reshape(n, g_h, patch, g_w, patch).any(axis=(2, 4)).reshape(n, g_h * g_w)


def position_tokens(masks: np.ndarray, patch: int) -> tuple[np.ndarray, np.ndarray]:
  """The tokens each region keeps, padded to the most any region keeps.

  Args:
    masks: ``[P, H, W]`` bool, every kept region (``position_masks``).
    patch: the ViT's patch side (pixels).

  Returns:
    ``(tokens [P, t] int32, valid [P, t] bool)``: each region's kept token indices in
    increasing order, then padding (index 0, not valid).
  """
  kept = kept_tokens(masks, patch)
  t = int(kept.sum(axis=1).max())
  order = np.argsort(~kept, axis=1, kind="stable")[:, :t]
  valid = np.take_along_axis(kept, order, axis=1)
  return np.where(valid, order, 0).astype(np.int32), valid


@dataclasses.dataclass(frozen=True)
class TokenApply:
  """``apply(variables, z [b, H, W, C'], tokens [b, t], valid [b, t]) -> logits``: a
  :class:`rsjax.models.VisionTransformer` in eval mode, dropping tokens (hashable: a static
  argument of ``jax.jit``)."""

  graphdef: Any

  def __call__(self, variables, z, tokens, valid):
    return nnx.merge(self.graphdef, variables, copy=True)(z, tokens=tokens, valid=valid)


@dataclasses.dataclass(frozen=True)
class MaskedApply:
  """``apply_fn(variables, z [b, H, W, C']) -> logits``: the same ViT on the full encoded
  image, every token that holds no kept pixel masked out (``valid``). A pixel is kept where
  any channel of its encoding is not 0 (``(x, 1 - x)`` never is), so this is a classifier of
  encoded images for ``patch_counts``: the reference of :func:`token_counts`."""

  graphdef: Any
  patch: int

  def __call__(self, variables, z):
    b, h, w, c = z.shape
    p = self.patch
    kept = (z != 0).reshape(b, h // p, p, w // p, p, c).any(axis=(2, 4, 5))
    model = nnx.merge(self.graphdef, variables, copy=True)
    return model(z, valid=kept.reshape(b, -1))


def _split(model: nnx.Module):
  if not hasattr(model, "_embed_tokens"):
    raise ValueError(f"model must be a rsjax VisionTransformer, got {type(model).__name__}")
  return nnx.split(model)


def to_token_apply(model: nnx.Module) -> tuple[TokenApply, nnx.State]:
  """``(apply, variables)`` of a ViT for :func:`token_counts`."""
  graphdef, variables = _split(model)
  return TokenApply(graphdef), variables


def to_masked_apply(model: nnx.Module) -> tuple[MaskedApply, nnx.State]:
  """``(apply_fn, variables)`` of a ViT on full encoded images, ablated tokens masked."""
  graphdef, variables = _split(model)
  return MaskedApply(graphdef, int(model.config.patch_size)), variables


@functools.partial(jax.jit, static_argnums=(0, 5, 6, 7))
def _token_counts(apply, params, x, steps, patch_tokens, num_classes, dtype, threshold):
  """Counts ``[B, C]`` of ``x [B, H, W, C]`` over ``steps = (masks [s, p, H, W], valid [s,
  p])`` with each position's ``patch_tokens = (tokens [s, p, t], kept [s, p, t])``."""
  masks, valid = steps
  tokens, kept = patch_tokens

  def step(acc, mvtk):
    m, v, tok, kep = mvtk  # [p, H, W], [p], [p, t], [p, t]
    b, p = x.shape[0], m.shape[0]
    z = encode(x[:, None], m[None]).reshape((b * p, *x.shape[1:-1], 2 * x.shape[-1]))
    z = z if dtype is None else z.astype(dtype)
    t = tok.shape[-1]
    tok = jnp.broadcast_to(tok[None], (b, p, t)).reshape(b * p, t)
    kep = jnp.broadcast_to(kep[None], (b, p, t)).reshape(b * p, t)
    votes = votes_of_logits(apply(params, z, tok, kep), b * p, num_classes, threshold)
    votes = votes.reshape((b, p, num_classes))
    return acc + jnp.sum(votes * v[None, :, None].astype(jnp.int32), axis=1), None

  init = jnp.zeros((x.shape[0], num_classes), jnp.int32)
  return jax.lax.scan(step, init, (masks, valid, tokens, kept))[0]


def token_counts(
  apply: TokenApply,
  params,
  x: np.ndarray,
  masks: np.ndarray,
  patch: int,
  num_classes: int,
  batch: int = 1000,
  precision: str = "float32",
  threshold: float | None = None,
) -> np.ndarray:
  """The exact class counts of derandomized smoothing with the ablated tokens dropped.

  Args:
    apply: ``apply(params, z, tokens, valid) -> logits`` (:func:`to_token_apply`).
    params: its variables.
    x: ``[B, H, W, C]`` images in [0, 1].
    masks: ``[P, H, W]`` bool, every kept region (``position_masks``).
    patch: the ViT's patch side.
    num_classes: C.
    batch: about this many forward passes per step (speed only).
    precision: the classifier's precision (as ``patch_counts``').
    threshold: None (top class) or every class whose softmax is at least this votes.

  Returns:
    ``[B, C]`` int64 counts, each row summing to ``P`` (without a threshold).
  """
  x = np.asarray(x, np.float32)
  masks = np.asarray(masks, bool)
  per_step = max(1, int(batch) // max(1, x.shape[0]))
  steps = padded_steps(masks, per_step)
  tokens, kept = position_tokens(masks, patch)
  s, p = steps[1].shape
  pad = s * p - len(tokens)
  tokens = np.concatenate([tokens, np.zeros((pad, tokens.shape[1]), np.int32)])
  kept = np.concatenate([kept, np.zeros((pad, kept.shape[1]), bool)])
  kept[len(masks) :, 0] = True  # padding positions (not counted) keep one token: no empty softmax
  patch_tokens = (tokens.reshape(s, p, -1), kept.reshape(s, p, -1))
  dtype = precision_lib.compute_dtype(precision)
  with precision_lib.context(precision):
    out = _token_counts(
      apply, cast_floating(params, dtype), jnp.asarray(x), steps, patch_tokens,
      int(num_classes), dtype, None if threshold is None else float(threshold),
    )  # fmt: skip
  return np.asarray(out, np.int64)
