"""Small models: MLP, LeNet-5 and a Keras-style MNIST CNN.

Inputs are ``[b, *input_shape]`` floats in [0, 1]; images are NHWC. Every model
starts with an optional ``Normalize`` layer and returns logits ``[b, C]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from rsjax.models._layers import image_shape, normalize_layer, normalized, torch_default_init

_W = torch_default_init
#: The named scope of LeNet's first convolution written as multiply-adds
#: (``few_channel_conv``); ``rsjax.app.bench.costs`` counts its multiplies as a convolution's.
FEW_CHANNEL_CONV = "few_channel_conv"
#: The most input channels for which LeNet's first convolution is :func:`few_channel_conv`.
FEW_CHANNELS = 4

__all__ = ["MLP", "LeNet", "CNN", "few_channel_conv"]


class MLP(nnx.Module):
  """Fully connected ReLU network on the flattened input.

  Args:
    input_shape: shape of one input (any rank), e.g. ``(8, 8, 1)`` or ``(2,)``.
    num_classes: number of output logits.
    hidden_sizes: widths of the hidden layers.
    normalize: ``None``, a dataset name or ``(mean, std)`` per last-axis channel,
      applied before flattening.
    dtype: optional computation dtype (parameters stay float32).
    rngs: ``nnx.Rngs`` for initialization.
  """

  def __init__(
    self,
    *,
    input_shape: Sequence[int],
    num_classes: int,
    hidden_sizes: Sequence[int] = (256, 256),
    normalize=None,
    dtype=None,
    rngs: nnx.Rngs,
  ):
    input_shape = tuple(int(s) for s in input_shape)
    if not input_shape or min(input_shape) < 1:
      raise ValueError(f"MLP needs a non-empty input_shape with positive sizes; got {input_shape}.")
    self.normalize = normalize_layer(normalize, input_shape[-1])
    sizes = [math.prod(input_shape), *(int(h) for h in hidden_sizes)]
    self.hidden = nnx.List(
      [
        nnx.Linear(a, b, kernel_init=_W, dtype=dtype, rngs=rngs)
        for a, b in zip(sizes[:-1], sizes[1:], strict=True)
      ]
    )
    self.head = nnx.Linear(sizes[-1], num_classes, kernel_init=_W, dtype=dtype, rngs=rngs)
    self.ndim = len(input_shape)

  def __call__(self, x: jax.Array) -> jax.Array:
    """``x`` of shape ``[b, *input_shape]`` -> logits ``[b, num_classes]``."""
    x = normalized(self, x)
    x = x.reshape(x.shape[: x.ndim - self.ndim] + (-1,))
    for layer in self.hidden:
      x = nnx.relu(layer(x))
    return self.head(x)


def few_channel_conv(conv: nnx.Conv, x: jax.Array, *, pad: int) -> jax.Array:
  """``conv(x)`` for an input of few channels as ``kh * kw * c_in`` multiply-adds of shifted
  images per output channel.

  Same arithmetic as the convolution (sums in another order, so results agree to float
  rounding): each output channel is ``x[0, 0, 0] k[0, 0, 0] + ... + bias``, taps in ``(i, j,
  channel)`` order, an elementwise loop over ``[b, H, W]`` that XLA fuses and vectorizes
  along W. On a CPU, where XLA's convolution kernels are built for many channels, LeNet's
  forward pass runs faster this way than with XLA's direct convolution: about 1.4x for
  1 -> 6 channels (``benchmarks/cpu_lenet_layers.py``), 1.6x to 2x for 2 (ablation's
  encoding) and 3 channels.

  Args:
    conv: an ``nnx.Conv`` with stride 1 and few input channels.
    x: ``[b, H, W, c_in]``.
    pad: symmetric spatial zero padding.

  Returns:
    ``[b, H + 2 pad - kh + 1, W + 2 pad - kw + 1, out_features]``.
  """
  # The named scope lets FLOP counters find these multiply-adds (rsjax.app.bench.costs); it
  # changes no arithmetic.
  with jax.named_scope(FEW_CHANNEL_CONV):
    dtype = conv.dtype or x.dtype
    k = conv.kernel[...].astype(dtype)
    bias = conv.bias[...].astype(dtype) if conv.bias is not None else None
    kh, kw, cin, cout = k.shape
    planes = [
      jnp.pad(x[..., c].astype(dtype), ((0, 0), (pad, pad), (pad, pad))) for c in range(cin)
    ]
    h, w = planes[0].shape[1] - kh + 1, planes[0].shape[2] - kw + 1
    taps = [(i, j, c) for i in range(kh) for j in range(kw) for c in range(cin)]
    outs = []
    for o in range(cout):
      acc = None
      for i, j, c in taps:
        tap = planes[c][:, i : i + h, j : j + w] * k[i, j, c, o]
        acc = tap if acc is None else acc + tap
      outs.append(acc if bias is None else acc + bias[o])
    return jnp.stack(outs, axis=-1)


class LeNet(nnx.Module):
  """LeNet with ReLU and max-pooling (MNIST-style).

  conv5x5(channels[0], pad ``padding``) - relu - maxpool2 - conv5x5(channels[1])
  - relu - maxpool2 - fc(hidden_sizes[0]) - relu - ... - fc(num_classes). The
  layers are named ``conv1``, ``conv2``, ``fc1``, ``fc2``, ...

  The default is LeNet-5 (6 and 16 channels, padding 2, hidden 120 and 84,
  about 62k parameters; needs H, W >= 12). ``channels=(20, 50),
  hidden_sizes=(500,), padding=0`` is the "LeNet" of the smoothing literature's
  PyTorch code (Consistency, MACER; about 431k parameters at 28x28).

  Args:
    input_shape: ``(H, W, C)``, e.g. ``(28, 28, 1)``.
    num_classes: number of output logits.
    normalize: ``None``, a dataset name or ``(mean, std)``; default MNIST.
    channels: output channels of the two convolutions.
    hidden_sizes: widths of the hidden fully connected layers.
    padding: symmetric zero padding of the first convolution.
    dtype: optional computation dtype.
    rngs: ``nnx.Rngs`` for initialization.
  """

  def __init__(
    self,
    *,
    input_shape: Sequence[int],
    num_classes: int,
    normalize="mnist",
    channels: Sequence[int] = (6, 16),
    hidden_sizes: Sequence[int] = (120, 84),
    padding: int = 2,
    dtype=None,
    rngs: nnx.Rngs,
  ):
    h, w, c = image_shape(input_shape, "LeNet")
    c1, c2 = (int(v) for v in channels)
    self.padding = int(padding)
    fh, fw = ((h + 2 * self.padding - 4) // 2 - 4) // 2, ((w + 2 * self.padding - 4) // 2 - 4) // 2
    if fh < 1 or fw < 1:
      least = 16 - 2 * self.padding
      raise ValueError(
        f"LeNet needs images of at least {least}x{least} (padding {self.padding}); got "
        f"input_shape {tuple(input_shape)}. Use 'cnn' or 'mlp' for smaller images."
      )
    self.normalize = normalize_layer(normalize, c)
    p = self.padding
    self.conv1 = nnx.Conv(
      c, c1, (5, 5), padding=((p, p), (p, p)), kernel_init=_W, dtype=dtype, rngs=rngs
    )
    self.conv2 = nnx.Conv(c1, c2, (5, 5), padding="VALID", kernel_init=_W, dtype=dtype, rngs=rngs)
    sizes = [c2 * fh * fw, *(int(s) for s in hidden_sizes), num_classes]
    self.num_fc = len(sizes) - 1
    for i in range(self.num_fc):
      layer = nnx.Linear(sizes[i], sizes[i + 1], kernel_init=_W, dtype=dtype, rngs=rngs)
      setattr(self, f"fc{i + 1}", layer)

  @property
  def elementwise_first_conv(self) -> bool:
    """Whether :meth:`first_conv` runs as :func:`few_channel_conv` (few input and output
    channels) rather than as the convolution."""
    return self.conv1.in_features <= FEW_CHANNELS and self.conv1.out_features <= 8

  def first_conv(self, x: jax.Array) -> jax.Array:
    """``conv1`` of normalized images ``[b, H, W, C]`` as the forward runs it:
    :func:`few_channel_conv` for few input and output channels, else the convolution."""
    if self.elementwise_first_conv:
      return few_channel_conv(self.conv1, x, pad=self.padding)
    return self.conv1(x)

  def after_first_conv(self, h: jax.Array) -> jax.Array:
    """The rest of the forward: ``conv1``'s output ``h [b, H', W', channels[0]]`` (before
    its ReLU) -> logits ``[b, num_classes]``."""
    x = nnx.max_pool(nnx.relu(h), (2, 2), strides=(2, 2))
    x = nnx.max_pool(nnx.relu(self.conv2(x)), (2, 2), strides=(2, 2))
    x = x.reshape(x.shape[0], -1)
    for i in range(1, self.num_fc):
      x = nnx.relu(getattr(self, f"fc{i}")(x))
    return getattr(self, f"fc{self.num_fc}")(x)

  def __call__(self, x: jax.Array) -> jax.Array:
    """``x`` of shape ``[b, H, W, C]`` -> logits ``[b, num_classes]``."""
    return self.after_first_conv(self.first_conv(normalized(self, x)))


class CNN(nnx.Module):
  """Keras-style MNIST CNN: conv3x3(32) - conv3x3(64) - maxpool2 - fc128 - fc.

  Valid padding; about 1.2M parameters at 28x28, works down to 6x6 inputs
  (e.g. the 8x8 scikit-learn digits).

  Args:
    input_shape: ``(H, W, C)``.
    num_classes: number of output logits.
    normalize: ``None``, a dataset name or ``(mean, std)``.
    dtype: optional computation dtype.
    rngs: ``nnx.Rngs`` for initialization.
  """

  def __init__(
    self,
    *,
    input_shape: Sequence[int],
    num_classes: int,
    normalize=None,
    dtype=None,
    rngs: nnx.Rngs,
  ):
    h, w, c = image_shape(input_shape, "CNN")
    fh, fw = (h - 4) // 2, (w - 4) // 2
    if fh < 1 or fw < 1:
      raise ValueError(f"CNN needs images of at least 6x6; got input_shape {tuple(input_shape)}.")
    self.normalize = normalize_layer(normalize, c)
    self.conv1 = nnx.Conv(c, 32, (3, 3), padding="VALID", kernel_init=_W, dtype=dtype, rngs=rngs)
    self.conv2 = nnx.Conv(32, 64, (3, 3), padding="VALID", kernel_init=_W, dtype=dtype, rngs=rngs)
    self.fc1 = nnx.Linear(64 * fh * fw, 128, kernel_init=_W, dtype=dtype, rngs=rngs)
    self.fc2 = nnx.Linear(128, num_classes, kernel_init=_W, dtype=dtype, rngs=rngs)

  def __call__(self, x: jax.Array) -> jax.Array:
    """``x`` of shape ``[b, H, W, C]`` -> logits ``[b, num_classes]``."""
    x = normalized(self, x)
    x = nnx.relu(self.conv1(x))
    x = nnx.max_pool(nnx.relu(self.conv2(x)), (2, 2), strides=(2, 2))
    x = x.reshape(x.shape[0], -1)
    return self.fc2(nnx.relu(self.fc1(x)))
