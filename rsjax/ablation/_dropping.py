"""Token dropping in training (``rsjax train --method patch --drop-tokens``; Salman, Jain, Wong
and Madry, CVPR 2022): the ViT trains on the kept region's patch tokens only, the very forward
``rsjax certify --drop-tokens`` runs (``_tokens.token_counts``).

Each training image is encoded with one kept band or block (``training.ablate_patch``); its kept
tokens are read off the encoding itself (a kept pixel is ``(x, 1 - x)``, never 0 in every
channel; an ablated one is), ordered and padded as ``_tokens.position_tokens`` orders them, to
the most tokens any position keeps. So the forward of an encoded image of position ``i`` takes
the same ``tokens`` and ``valid`` as the certifier's at ``i``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from rsjax.ablation._ablate import position_masks
from rsjax.ablation._tokens import position_tokens
from rsjax.models import VisionTransformer

__all__ = ["DroppingViT", "dropped_tokens", "dropping_twin", "most_tokens"]


def most_tokens(shape, ablation: str, size: int, patch: int) -> int:
  """The most patch tokens any region of ``ablation`` ``size`` keeps in an image ``shape (H, W,
  C)`` (``position_tokens``' padded width)."""
  return int(position_tokens(position_masks(tuple(shape), ablation, size), patch)[0].shape[1])


def dropped_tokens(z: jax.Array, patch: int, t: int) -> tuple[jax.Array, jax.Array]:
  """The kept tokens of encoded images, as ``position_tokens`` gives them.

  Args:
    z: ``[b, H, W, C']`` encoded images (0 in every channel at an ablated pixel).
    patch: the ViT's patch side.
    t: the width to pad to (:func:`most_tokens`).

  Returns:
    ``(tokens [b, t] int32, valid [b, t] bool)``: each image's tokens holding a kept pixel in
    increasing order, then padding (index 0, not valid).
  """
  b, h, w, c = z.shape
  kept = (z != 0).reshape(b, h // patch, patch, w // patch, patch, c).any(axis=(2, 4, 5))
  kept = kept.reshape(b, -1)
  order = jnp.argsort(~kept, axis=1, stable=True)[:, :t]
  valid = jnp.take_along_axis(kept, order, axis=1)
  return jnp.where(valid, order, 0).astype(jnp.int32), valid


class DroppingViT(VisionTransformer):
  """A :class:`rsjax.models.VisionTransformer` whose plain call ``model(z)`` drops the ablated
  tokens of the encoded images ``z`` (:func:`dropped_tokens`); the same parameters (its state
  is a plain ViT's, so its checkpoints load as one)."""

  def __init__(self, config, t: int, *, rngs: nnx.Rngs | int) -> None:
    super().__init__(config, rngs=rngs)
    self.most_tokens = int(t)

  def __call__(self, x, tokens=None, valid=None):
    if tokens is None and valid is None:
      tokens, valid = dropped_tokens(x, int(self.config.patch_size), self.most_tokens)
    return super().__call__(x, tokens=tokens, valid=valid)


def dropping_twin(model: nnx.Module, ablation: str, size: int) -> DroppingViT:
  """A :class:`DroppingViT` holding ``model``'s parameters, for ``ablation`` of ``size``.

  Raises:
    ValueError: ``model`` is no rsjax ViT (one line, naming ``--drop-tokens``).
  """
  if type(model) is not VisionTransformer:
    raise ValueError(
      "--drop-tokens trains a rsjax ViT (--model vit, or --init a ViT directory), got "
      f"{type(model).__name__}"
    )
  cfg = model.config
  shape = (cfg.image_size, cfg.image_size, cfg.num_channels)
  twin = DroppingViT(cfg, most_tokens(shape, ablation, size, cfg.patch_size), rngs=0)
  nnx.update(twin, nnx.state(model))
  return twin
