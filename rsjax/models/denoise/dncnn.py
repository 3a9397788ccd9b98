"""DnCNN (Zhang et al. 2017) as used by Salman et al. (2020) for denoised smoothing."""

from __future__ import annotations

import jax
from flax import nnx

__all__ = ["DnCNN"]


class DnCNN(nnx.Module):
  """Residual denoiser ``D(y) = y - net(y)`` on NHWC images in [0, 1].

  ``net``: conv(channels -> features) + ReLU, ``depth - 2`` x [conv (no bias) + BatchNorm +
  ReLU], conv(features -> channels, no bias). Salman et al.'s ``cifar_dncnn`` is depth 17,
  64 features (BatchNorm eps 1e-4 as theirs; Flax's running-average momentum 0.9). The last
  conv starts at zero, so the untrained denoiser is the identity.

  Args:
    channels: image channels.
    depth: number of conv layers (>= 2).
    features: width of the hidden layers.
    rngs: ``nnx.Rngs`` or int seed.
  """

  def __init__(self, *, channels: int, depth: int = 17, features: int = 64, rngs: nnx.Rngs | int):
    if depth < 2 or features < 1 or channels < 1:
      raise ValueError(
        f"need depth >= 2, features >= 1, channels >= 1, got {depth}, {features}, {channels}"
      )
    rngs = nnx.Rngs(rngs) if isinstance(rngs, int) else rngs
    ortho = nnx.initializers.orthogonal()
    self.first = nnx.Conv(channels, features, (3, 3), padding="SAME", kernel_init=ortho, rngs=rngs)
    self.convs = nnx.List(
      [
        nnx.Conv(
          features, features, (3, 3), padding="SAME", use_bias=False, kernel_init=ortho, rngs=rngs
        )
        for _ in range(depth - 2)
      ]
    )
    self.norms = nnx.List(
      [nnx.BatchNorm(features, epsilon=1e-4, rngs=rngs) for _ in range(depth - 2)]
    )
    self.last = nnx.Conv(
      features,
      channels,
      (3, 3),
      padding="SAME",
      use_bias=False,
      kernel_init=nnx.initializers.zeros,
      rngs=rngs,
    )

  def __call__(self, y: jax.Array) -> jax.Array:
    """``y [b, H, W, channels]`` -> denoised ``[b, H, W, channels]``."""
    h = nnx.relu(self.first(y))
    for conv, norm in zip(self.convs, self.norms, strict=True):
      h = nnx.relu(norm(conv(h)))
    return y - self.last(h)
