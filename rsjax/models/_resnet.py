"""ResNets: CIFAR basic-block ResNets (20, 110, 18) and torchvision's ImageNet ResNets (v1.5).

Layouts follow the PyTorch code the randomized smoothing literature uses, so
published checkpoints can be converted one tensor at a time:

- ``CifarResNet`` / ``ResNet20`` / ``ResNet110``: Cohen et al.'s
  ``cifar_resnet`` (from bearpaw's pytorch-classification): 3x3 stem with 16
  channels, three stages of ``n = (depth - 2) / 6`` basic blocks with 16, 32
  and 64 channels, 1x1 convolution + BatchNorm projection shortcuts when the
  shape changes, global average pooling, linear head.
- ``ResNet18``: the CIFAR ResNet-18 (kuangliu): 3x3 stem with 64 channels, no
  max-pool, four stages of two basic blocks with 64-512 channels.
- ``ImageNetResNet`` / ``ResNet50``: torchvision's ResNet-18/34/50/101/152
  (v1.5: the stride is on the 3x3 convolution of the bottleneck), 7x7 stride-2
  stem and 3x3 stride-2 max-pool.

Padding is explicit and symmetric as in PyTorch (not XLA "SAME", which pads
stride-2 convolutions asymmetrically). BatchNorm uses PyTorch's defaults
(momentum 0.1, i.e. ``momentum=0.9`` here; epsilon 1e-5). Convolutions have no
bias and use He-normal (fan-out) initialization.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from flax import nnx

from rsjax.models._layers import (
  BN_EPSILON,
  BN_MOMENTUM,
  conv_init,
  image_shape,
  normalize_layer,
  normalized,
  torch_default_init,
)

__all__ = [
  "BasicResNet",
  "CifarResNet",
  "ImageNetResNet",
  "ResNet20",
  "ResNet110",
  "ResNet18",
  "ResNet50",
]


def _conv_bn(cin, cout, k, stride, *, dtype, rngs):
  """A ``k x k`` convolution without bias (PyTorch's symmetric padding) and the BatchNorm of its
  ``cout`` outputs."""
  p = (k - 1) // 2
  conv = nnx.Conv(
    cin,
    cout,
    (k, k),
    strides=(stride, stride),
    padding=((p, p), (p, p)),
    use_bias=False,
    kernel_init=conv_init,
    dtype=dtype,
    rngs=rngs,
  )
  return conv, nnx.BatchNorm(cout, momentum=BN_MOMENTUM, epsilon=BN_EPSILON, dtype=dtype, rngs=rngs)


def stem(model: nnx.Module, x: jax.Array) -> jax.Array:
  """The input normalization and the conv + BN + ReLU stem of ``model`` (a :class:`ResNetBase`
  or a packed one), with the 3x3 stride-2 max-pool after it when ``model.stem_max_pool``:
  ``x`` ``[b, H, W, C]`` -> ``[b, H', W', widths[0]]``."""
  x = normalized(model, x)
  x = nnx.relu(model.stem_bn(model.stem_conv(x)))
  if model.stem_max_pool:
    x = nnx.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
  return x


class _ResidualBlock(nnx.Module):
  """Shared shortcut of the blocks: identity, or 1x1 conv + BN when the shape changes."""

  def _init_shortcut(self, cin: int, cout: int, stride: int, *, dtype, rngs: nnx.Rngs):
    if stride != 1 or cin != cout:
      self.proj_conv, self.proj_bn = _conv_bn(cin, cout, 1, stride, dtype=dtype, rngs=rngs)
    else:
      self.proj_conv = self.proj_bn = None

  def _add_shortcut(self, x: jax.Array, y: jax.Array) -> jax.Array:
    """``relu(shortcut(x) + y)``."""
    if self.proj_conv is not None:
      x = self.proj_bn(self.proj_conv(x))
    return nnx.relu(x + y)


class BasicBlock(_ResidualBlock):
  """conv3x3-BN-relu-conv3x3-BN + shortcut, then relu."""

  expansion = 1

  def __init__(self, cin: int, cout: int, stride: int, *, dtype, rngs: nnx.Rngs):
    self.conv1, self.bn1 = _conv_bn(cin, cout, 3, stride, dtype=dtype, rngs=rngs)
    self.conv2, self.bn2 = _conv_bn(cout, cout, 3, 1, dtype=dtype, rngs=rngs)
    self._init_shortcut(cin, cout, stride, dtype=dtype, rngs=rngs)

  def __call__(self, x: jax.Array) -> jax.Array:
    y = nnx.relu(self.bn1(self.conv1(x)))
    y = self.bn2(self.conv2(y))
    return self._add_shortcut(x, y)


class Bottleneck(_ResidualBlock):
  """conv1x1-BN-relu-conv3x3(stride)-BN-relu-conv1x1(4w)-BN + shortcut, relu."""

  expansion = 4

  def __init__(self, cin: int, width: int, stride: int, *, dtype, rngs: nnx.Rngs):
    cout = width * self.expansion
    self.conv1, self.bn1 = _conv_bn(cin, width, 1, 1, dtype=dtype, rngs=rngs)
    self.conv2, self.bn2 = _conv_bn(width, width, 3, stride, dtype=dtype, rngs=rngs)
    self.conv3, self.bn3 = _conv_bn(width, cout, 1, 1, dtype=dtype, rngs=rngs)
    self._init_shortcut(cin, cout, stride, dtype=dtype, rngs=rngs)

  def __call__(self, x: jax.Array) -> jax.Array:
    y = nnx.relu(self.bn1(self.conv1(x)))
    y = nnx.relu(self.bn2(self.conv2(y)))
    y = self.bn3(self.conv3(y))
    return self._add_shortcut(x, y)


class ResNetBase(nnx.Module):
  """What the ResNets share: input normalization, a conv + BN stem (followed by a 3x3 stride-2
  max-pool when ``stem_max_pool``), stages of residual blocks, global average pooling and a
  linear head."""

  # The stem: a 3x3 stride-1 convolution (CIFAR-style), no max-pool.
  stem_kernel = 3
  stem_stride = 1
  stem_max_pool = False

  def _build(
    self,
    input_shape,
    num_classes,
    normalize,
    block_cls,
    stage_sizes,
    widths,
    *,
    dtype,
    rngs: nnx.Rngs,
  ):
    """Creates the layers; the stem (a ``stem_kernel`` convolution of stride ``stem_stride``)
    has ``widths[0]`` channels, stage ``i > 0`` starts with stride 2."""
    c = image_shape(input_shape, type(self).__name__)[-1]
    self.normalize = normalize_layer(normalize, c)
    self.stem_conv, self.stem_bn = _conv_bn(
      c, widths[0], self.stem_kernel, self.stem_stride, dtype=dtype, rngs=rngs
    )
    blocks = []
    cin = widths[0]
    for i, (n, w) in enumerate(zip(stage_sizes, widths, strict=True)):
      for j in range(int(n)):
        stride = 2 if (i > 0 and j == 0) else 1
        blocks.append(block_cls(cin, w, stride, dtype=dtype, rngs=rngs))
        cin = w * block_cls.expansion
    self.blocks = nnx.List(blocks)
    self.head = nnx.Linear(cin, num_classes, kernel_init=torch_default_init, dtype=dtype, rngs=rngs)

  def features(self, x: jax.Array) -> jax.Array:
    """Pooled features ``[b, widths[-1] * block expansion]`` of ``x`` ``[b, H, W, C]``."""
    x = stem(self, x)
    for block in self.blocks:
      x = block(x)
    return x.mean(axis=(1, 2))

  def __call__(self, x: jax.Array) -> jax.Array:
    """``x`` of shape ``[b, H, W, C]`` in [0, 1] -> logits ``[b, num_classes]``."""
    return self.head(self.features(x))


class BasicResNet(ResNetBase):
  """Basic-block ResNet with a 3x3 stem and no max-pool (CIFAR-style).

  Args:
    input_shape: ``(H, W, C)``, e.g. ``(32, 32, 3)``.
    num_classes: number of output logits.
    stage_sizes: number of blocks per stage, e.g. ``(3, 3, 3)``.
    widths: channels per stage; the stem has ``widths[0]`` channels. The first
      stage has stride 1, every later stage stride 2.
    normalize: ``None``, a dataset name or ``(mean, std)``; default CIFAR-10.
    dtype: optional computation dtype (parameters stay float32).
    rngs: ``nnx.Rngs`` for initialization.
  """

  def __init__(
    self,
    *,
    input_shape: Sequence[int],
    num_classes: int,
    stage_sizes: Sequence[int],
    widths: Sequence[int],
    normalize="cifar10",
    dtype=None,
    rngs: nnx.Rngs,
  ):
    if len(stage_sizes) != len(widths) or not stage_sizes:
      raise ValueError(f"stage_sizes {stage_sizes} and widths {widths} must have the same length.")
    self._build(
      input_shape,
      num_classes,
      normalize,
      BasicBlock,
      stage_sizes,
      widths,
      dtype=dtype,
      rngs=rngs,
    )


class CifarResNet(BasicResNet):
  """Cohen et al.'s CIFAR ResNet of depth ``6 n + 2`` (16/32/64 channels)."""

  def __init__(
    self,
    *,
    depth: int,
    input_shape: Sequence[int] = (32, 32, 3),
    num_classes: int = 10,
    normalize="cifar10",
    dtype=None,
    rngs: nnx.Rngs,
  ):
    if depth < 8 or (depth - 2) % 6:
      raise ValueError(
        f"CifarResNet depth must be 6n + 2 with n >= 1 (20, 32, 110, ...); got {depth}."
      )
    n = (depth - 2) // 6
    super().__init__(
      input_shape=input_shape,
      num_classes=num_classes,
      stage_sizes=(n, n, n),
      widths=(16, 32, 64),
      normalize=normalize,
      dtype=dtype,
      rngs=rngs,
    )


class ResNet20(CifarResNet):
  """CIFAR ResNet-20 (3 basic blocks per stage, about 0.27M parameters).

  Args:
    **options: the keywords of :class:`CifarResNet` but ``depth`` (``20``).
  """

  def __init__(self, **options: Any):
    super().__init__(depth=20, **options)


class ResNet110(CifarResNet):
  """CIFAR ResNet-110 of Cohen et al. (18 basic blocks per stage, about 1.7M parameters).

  Args:
    **options: the keywords of :class:`CifarResNet` but ``depth`` (``110``).
  """

  def __init__(self, **options: Any):
    super().__init__(depth=110, **options)


class ResNet18(BasicResNet):
  """CIFAR ResNet-18: 3x3 stem, no max-pool, 64-512 channels (about 11.2M parameters)."""

  def __init__(
    self,
    *,
    input_shape: Sequence[int] = (32, 32, 3),
    num_classes: int = 10,
    normalize="cifar10",
    dtype=None,
    rngs: nnx.Rngs,
  ):
    super().__init__(
      input_shape=input_shape,
      num_classes=num_classes,
      stage_sizes=(2, 2, 2, 2),
      widths=(64, 128, 256, 512),
      normalize=normalize,
      dtype=dtype,
      rngs=rngs,
    )


class ImageNetResNet(ResNetBase):
  """torchvision's ImageNet ResNets: 7x7 stride-2 stem, 3x3 stride-2 max-pool, four stages.

  Basic blocks give ResNet-18 (``stage_sizes=(2, 2, 2, 2)``) and ResNet-34
  (``(3, 4, 6, 3)``); bottleneck blocks (v1.5: the stride is on the 3x3
  convolution) give ResNet-50 (``(3, 4, 6, 3)``), -101 (``(3, 4, 23, 3)``) and
  -152 (``(3, 8, 36, 3)``). Stage widths are 64, 128, 256 and 512 (times 4 at
  the output of a bottleneck).

  Args:
    input_shape: ``(H, W, C)``, normally ``(224, 224, 3)``; any size >= 32 works.
    num_classes: number of output logits (1000 for ImageNet).
    block: "basic" or "bottleneck".
    stage_sizes: number of blocks in each of the four stages.
    normalize: ``None``, a dataset name or ``(mean, std)``; default ImageNet.
    dtype: optional computation dtype (parameters stay float32).
    rngs: ``nnx.Rngs`` for initialization.
  """

  widths = (64, 128, 256, 512)
  stem_kernel = 7
  stem_stride = 2
  stem_max_pool = True

  def __init__(
    self,
    *,
    input_shape: Sequence[int] = (224, 224, 3),
    num_classes: int = 1000,
    block: str = "bottleneck",
    stage_sizes: Sequence[int] = (3, 4, 6, 3),
    normalize="imagenet2012",
    dtype=None,
    rngs: nnx.Rngs,
  ):
    blocks_by_name = {"basic": BasicBlock, "bottleneck": Bottleneck}
    if block not in blocks_by_name:
      raise ValueError(f"block must be 'basic' or 'bottleneck'; got {block!r}.")
    if len(stage_sizes) != 4 or min(stage_sizes) < 1:
      raise ValueError(f"stage_sizes must be four positive counts; got {tuple(stage_sizes)}.")
    self._build(
      input_shape,
      num_classes,
      normalize,
      blocks_by_name[block],
      stage_sizes,
      self.widths,
      dtype=dtype,
      rngs=rngs,
    )


class ResNet50(ImageNetResNet):
  """ImageNet ResNet-50 v1.5 (torchvision layout, about 25.6M parameters at 1000 classes).

  Args:
    **options: the keywords of :class:`ImageNetResNet` but ``block`` and ``stage_sizes``
      (``input_shape``, ``num_classes``, ``normalize``, ``dtype``, ``rngs``).
  """

  stage_sizes = (3, 4, 6, 3)

  def __init__(self, **options: Any):
    super().__init__(block="bottleneck", stage_sizes=self.stage_sizes, **options)
