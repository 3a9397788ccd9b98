"""A small multi-resolution DEQ (MDEQ-style, Bai et al. 2020) in Flax NNX.

Two streams, at the stem's resolution ``h x w`` (``C1`` channels) and at half
of it (``C2`` channels), are solved for jointly::

  u1 = GN(stem(x)),  u2 = GN(conv_s2(u1))                     (injections)
  y_i = DEQCell_i(z_i, u_i)                                    (per-stream block)
  f(z)_1 = GN(relu(y1 + upsample(conv1x1(y2))))               (fusion)
  f(z)_2 = GN(relu(y2 + conv_s2(y1)))
  logits = fc(flatten(relu(GN(conv(z2* + conv_s2(z1*))))))

The state of both streams is packed into one ``[b, D]`` vector
(``D = h w C1 + h/2 w/2 C2``), so the batched solvers, warm starts and SRS work
on it unchanged. Everything is per sample (GroupNorm), as the solvers require.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from rsjax.models._deq import DEQCell, DEQModel, normal_init
from rsjax.models._solvers import SolverConfig

__all__ = ["MDEQCell", "MDEQClassifier"]


class MDEQCell(nnx.Module):
  """The two-stream equilibrium map on packed ``[b, D]`` states.

  Args:
    shapes: ``((h, w, C1), (h2, w2, C2))`` of the two streams.
    groups: GroupNorm groups (divides ``C1`` and ``C2``).
    init_std: std of the normal initialization of the convolutions.
    dtype: optional computation dtype.
    rngs: ``nnx.Rngs``.
  """

  def __init__(self, shapes, *, groups: int, init_std: float, dtype=None, rngs: nnx.Rngs):
    (self.shape1, self.shape2) = (tuple(shapes[0]), tuple(shapes[1]))
    c1, c2 = self.shape1[-1], self.shape2[-1]
    kw = dict(dtype=dtype, rngs=rngs)
    w = normal_init(init_std)
    self.block1 = DEQCell(c1, groups=groups, init_std=init_std, **kw)
    self.block2 = DEQCell(c2, groups=groups, init_std=init_std, **kw)
    self.up = nnx.Conv(c2, c1, (1, 1), use_bias=False, kernel_init=w, **kw)
    self.down = nnx.Conv(c1, c2, (3, 3), strides=2, use_bias=False, kernel_init=w, **kw)
    self.gn1 = nnx.GroupNorm(c1, num_groups=groups, **kw)
    self.gn2 = nnx.GroupNorm(c2, num_groups=groups, **kw)

  def unpack(self, z: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``[b, D] -> ([b, h, w, C1], [b, h2, w2, C2])``."""
    n1 = math.prod(self.shape1)
    return z[:, :n1].reshape(-1, *self.shape1), z[:, n1:].reshape(-1, *self.shape2)

  @staticmethod
  def pack(z1: jax.Array, z2: jax.Array) -> jax.Array:
    return jnp.concatenate([z1.reshape(z1.shape[0], -1), z2.reshape(z2.shape[0], -1)], axis=1)

  def __call__(self, z: jax.Array, u: jax.Array) -> jax.Array:
    """``z, u [b, D] -> f(z, u) [b, D]``."""
    (z1, z2), (u1, u2) = self.unpack(z), self.unpack(u)
    y1, y2 = self.block1(z1, u1), self.block2(z2, u2)
    up = jnp.repeat(jnp.repeat(self.up(y2), 2, axis=1), 2, axis=2)
    up = up[:, : y1.shape[1], : y1.shape[2]]
    return self.pack(self.gn1(nnx.relu(y1 + up)), self.gn2(nnx.relu(y2 + self.down(y1))))


class MDEQClassifier(DEQModel):
  """Two-resolution MDEQ-style classifier for NHWC images in [0, 1].

  Args:
    input_shape: ``(H, W, C_in)``.
    num_classes: number of logits.
    channels: ``(C1, C2)`` channels of the full- and half-resolution streams.
    groups: GroupNorm groups.
    stem_stride: stride of the stem (the first stream is ``H/s x W/s``).
    normalize: ``None``, a dataset name or ``(mean, std)``.
    solver, steps, backward: training solvers (as ``DEQClassifier``).
    init_std: std of the cell's convolution weights at initialization.
    jac_weight: weight of the Jacobian regularizer in training (0: none).
    dtype: optional computation dtype.
    rngs: ``nnx.Rngs`` or an int seed.
  """

  def __init__(
    self,
    *,
    input_shape: Sequence[int] = (28, 28, 1),
    num_classes: int = 10,
    channels: Sequence[int] = (8, 16),
    groups: int = 4,
    stem_stride: int = 2,
    normalize="mnist",
    solver: SolverConfig | str = "anderson",
    steps: int = 12,
    backward: SolverConfig | str | None = None,
    init_std: float = 0.01,
    jac_weight: float = 0.0,
    dtype=None,
    rngs: nnx.Rngs | int = 0,
  ):
    rngs = nnx.Rngs(rngs) if isinstance(rngs, int) else rngs
    shape = self.setup_input(input_shape, num_classes, normalize)
    c1, c2 = (int(c) for c in channels)
    if c1 % groups or c2 % groups:
      raise ValueError(f"channels={tuple(channels)} must be multiples of groups={groups}")
    kw = dict(dtype=dtype, rngs=rngs)
    h, w = -(-shape[0] // stem_stride), -(-shape[1] // stem_stride)
    h2, w2 = -(-h // 2), -(-w // 2)
    self.stem = nnx.Conv(shape[-1], c1, (3, 3), strides=stem_stride, use_bias=False, **kw)
    self.stem_gn = nnx.GroupNorm(c1, num_groups=groups, **kw)
    self.stem2 = nnx.Conv(c1, c2, (3, 3), strides=2, use_bias=False, **kw)
    self.stem2_gn = nnx.GroupNorm(c2, num_groups=groups, **kw)
    self.cell = MDEQCell(((h, w, c1), (h2, w2, c2)), groups=groups, init_std=init_std, **kw)
    self.head_down = nnx.Conv(c1, c2, (3, 3), strides=2, use_bias=False, **kw)
    self.head_conv = nnx.Conv(c2, 2 * c2, (3, 3), use_bias=False, **kw)
    self.head_gn = nnx.GroupNorm(2 * c2, num_groups=groups, **kw)
    self.fc = nnx.Linear(h2 * w2 * 2 * c2, self.num_classes, **kw)
    self.setup_solver(solver, steps, backward, jac_weight, rngs)

  def inject(self, x: jax.Array) -> jax.Array:
    """``x [b, H, W, C_in]`` in [0, 1] -> packed injection ``[b, D]``."""
    x = self.normalized(x)
    u1 = self.stem_gn(self.stem(x))
    return self.cell.pack(u1, self.stem2_gn(self.stem2(u1)))

  def head(self, z: jax.Array) -> jax.Array:
    """Packed fixed point ``z [b, D]`` -> logits ``[b, num_classes]``."""
    z1, z2 = self.cell.unpack(z)
    y = nnx.relu(self.head_gn(self.head_conv(z2 + self.head_down(z1))))
    return self.fc(y.reshape(y.shape[0], -1))
