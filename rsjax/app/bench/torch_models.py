"""rsjax's models in PyTorch, with the same weights: the networks both baselines run.

``from_flax`` builds a ``torch.nn.Module`` equal to an ``rsjax.models`` NNX model
(MLP, CNN, LeNet, the CIFAR basic-block ResNets, ResNet-50), copying its
weights, so both sides run *the same network with the same weights*. Inputs of
the PyTorch modules are NCHW (as in the reference); flattening layers permute
their weights so that the NCHW flatten order matches Flax's NHWC order.
``check_same_logits`` checks that they agree before anything is timed.

PyTorch is optional (``pip install torch``): only ``rsjax bench --twin`` (and the repository's
benchmarks) import this module.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["from_flax", "has_twin", "to_torch_layout", "check_same_logits"]


def _np(var) -> np.ndarray:
  return np.asarray(var[...], dtype=np.float32)


def _t(a: np.ndarray) -> torch.Tensor:
  return torch.from_numpy(np.array(a, dtype=np.float32))  # a writable copy


class Normalize(nn.Module):
  """``(x - mean) / std`` per channel (dim 1), Cohen et al.'s ``NormalizeLayer``."""

  def __init__(self, mean, std):
    super().__init__()
    self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32))
    self.register_buffer("std", torch.tensor(std, dtype=torch.float32))

  def forward(self, x):
    shape = (1, -1) + (1,) * (x.dim() - 2)
    return (x - self.mean.view(shape)) / self.std.view(shape)


def _normalize(flax_norm):
  return Normalize(flax_norm.mean, flax_norm.std) if flax_norm is not None else nn.Identity()


def _conv(flax_conv) -> nn.Conv2d:
  """A Conv2d with the kernel ``[kh, kw, cin, cout]`` -> ``[cout, cin, kh, kw]``."""
  k = _np(flax_conv.kernel)
  kh, kw, cin, cout = k.shape
  pad = flax_conv.padding
  if isinstance(pad, str):
    if pad != "VALID":
      raise ValueError(f"unsupported padding {pad!r} (explicit or VALID only)")
    pad = ((0, 0), (0, 0))
  (pt, pb), (pl, pr) = pad
  if pt != pb or pl != pr:
    raise ValueError(f"asymmetric padding {pad} has no Conv2d equivalent")
  strides = flax_conv.strides if flax_conv.strides is not None else 1
  strides = (strides, strides) if isinstance(strides, int) else tuple(strides)
  conv = nn.Conv2d(
    cin, cout, (kh, kw), stride=strides, padding=(pt, pl), bias=flax_conv.bias is not None
  )
  with torch.no_grad():
    conv.weight.copy_(_t(k.transpose(3, 2, 0, 1)))
    if flax_conv.bias is not None:
      conv.bias.copy_(_t(_np(flax_conv.bias)))
  return conv


def _linear(flax_linear, permute_from=None) -> nn.Linear:
  """A Linear with kernel ``[in, out]`` -> ``[out, in]``.

  ``permute_from=(H, W, C)`` reorders the input features from Flax's NHWC
  flatten order to PyTorch's NCHW order.
  """
  k = _np(flax_linear.kernel)
  if permute_from is not None:
    h, w, c = permute_from
    k = k.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(h * w * c, -1)
  lin = nn.Linear(k.shape[0], k.shape[1], bias=flax_linear.bias is not None)
  with torch.no_grad():
    lin.weight.copy_(_t(k.T))
    if flax_linear.bias is not None:
      lin.bias.copy_(_t(_np(flax_linear.bias)))
  return lin


def _bn(flax_bn) -> nn.BatchNorm2d:
  bn = nn.BatchNorm2d(flax_bn.num_features, eps=flax_bn.epsilon)
  with torch.no_grad():
    bn.weight.copy_(_t(_np(flax_bn.scale)))
    bn.bias.copy_(_t(_np(flax_bn.bias)))
    bn.running_mean.copy_(_t(_np(flax_bn.mean)))
    bn.running_var.copy_(_t(_np(flax_bn.var)))
  return bn.eval()


class MLP(nn.Module):
  def __init__(self, m, input_shape):
    super().__init__()
    self.normalize = _normalize(m.normalize)
    # The first linear layer reads the flattened image: NHWC -> NCHW feature order.
    perm = input_shape if len(input_shape) == 3 else None
    self.hidden = nn.ModuleList(
      [_linear(layer, permute_from=perm if i == 0 else None) for i, layer in enumerate(m.hidden)]
    )
    self.head = _linear(m.head, permute_from=None if len(self.hidden) else perm)

  def forward(self, x):
    x = self.normalize(x).flatten(1)
    for layer in self.hidden:
      x = F.relu(layer(x))
    return self.head(x)


class _TwoConvNet(nn.Module):
  """The layers LeNet and CNN share: normalize, conv1, conv2, fc1 (reading the
  ``flat_hwc`` feature map flattened in Flax's NHWC order), fc2."""

  def __init__(self, m, flat_hwc):
    super().__init__()
    self.normalize = _normalize(m.normalize)
    self.conv1, self.conv2 = _conv(m.conv1), _conv(m.conv2)
    self.fc1 = _linear(m.fc1, permute_from=flat_hwc)
    self.fc2 = _linear(m.fc2)


class LeNet(_TwoConvNet):
  def __init__(self, m, input_shape):
    h, w, _ = input_shape
    super().__init__(m, ((h // 2 - 4) // 2, (w // 2 - 4) // 2, 16))
    self.fc3 = _linear(m.fc3)

  def forward(self, x):
    x = self.normalize(x)
    x = F.max_pool2d(F.relu(self.conv1(x)), 2)
    x = F.max_pool2d(F.relu(self.conv2(x)), 2)
    x = x.flatten(1)
    return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class CNN(_TwoConvNet):
  def __init__(self, m, input_shape):
    h, w, _ = input_shape
    super().__init__(m, ((h - 4) // 2, (w - 4) // 2, 64))

  def forward(self, x):
    x = self.normalize(x)
    x = F.relu(self.conv1(x))
    x = F.max_pool2d(F.relu(self.conv2(x)), 2)
    return self.fc2(F.relu(self.fc1(x.flatten(1))))


class BasicBlock(nn.Module):
  def __init__(self, b):
    super().__init__()
    self.conv1, self.bn1 = _conv(b.conv1), _bn(b.bn1)
    self.conv2, self.bn2 = _conv(b.conv2), _bn(b.bn2)
    self.shortcut = (
      nn.Sequential(_conv(b.proj_conv), _bn(b.proj_bn))
      if b.proj_conv is not None
      else nn.Identity()
    )

  def forward(self, x):
    y = F.relu(self.bn1(self.conv1(x)))
    y = self.bn2(self.conv2(y))
    return F.relu(self.shortcut(x) + y)


class Bottleneck(BasicBlock):
  """The basic block's layers, a relu after the second and a third 1x1 conv + BN."""

  def __init__(self, b):
    super().__init__(b)
    self.conv3, self.bn3 = _conv(b.conv3), _bn(b.bn3)

  def forward(self, x):
    y = F.relu(self.bn1(self.conv1(x)))
    y = F.relu(self.bn2(self.conv2(y)))
    y = self.bn3(self.conv3(y))
    return F.relu(self.shortcut(x) + y)


class ResNet(nn.Module):
  """Basic-block CIFAR ResNets (3x3 stem) and ResNet-50 (7x7 stem + max-pool)."""

  def __init__(self, m, bottleneck: bool):
    super().__init__()
    self.normalize = _normalize(m.normalize)
    self.stem = nn.Sequential(_conv(m.stem_conv), _bn(m.stem_bn), nn.ReLU())
    self.pool = nn.MaxPool2d(3, 2, 1) if bottleneck else nn.Identity()
    block = Bottleneck if bottleneck else BasicBlock
    self.blocks = nn.Sequential(*[block(b) for b in m.blocks])
    self.head = _linear(m.head)

  def forward(self, x):
    x = self.pool(self.stem(self.normalize(x)))
    x = self.blocks(x)
    return self.head(x.mean(dim=(2, 3)))


def from_flax(model, input_shape) -> nn.Module:
  """A PyTorch module computing the same function as an ``rsjax.models`` model (eval mode).

  Args:
    model: an NNX model from ``rsjax.models`` (MLP, CNN, LeNet, BasicResNet and
      subclasses, ResNet50), e.g. ``nnx.merge(apply_fn.graphdef, variables)``.
    input_shape: shape of one input as rsjax sees it (``(H, W, C)`` for images).

  Returns:
    An ``nn.Module`` in eval mode taking NCHW inputs (the MLP: the rsjax shape
    moved to channels-first when it is an image).
  """
  build = _builder(model)
  if build is None:
    raise ValueError(f"no PyTorch twin for {type(model).__name__}")
  return build(model, tuple(int(s) for s in input_shape)).eval()


def has_twin(model) -> bool:
  """Whether :func:`from_flax` translates ``model``."""
  return _builder(model) is not None


def _builder(model):
  """``build(model, input_shape) -> nn.Module`` of ``model``'s class, or None (no twin)."""
  from rsjax import models

  builds = (
    (nn.Module, lambda m, _: copy.deepcopy(m)),  # a PyTorch module: its own twin
    (models.MLP, MLP),
    (models.LeNet, LeNet),
    (models.CNN, CNN),
    (models.ResNet50, lambda m, _: ResNet(m, bottleneck=True)),
    (models.BasicResNet, lambda m, _: ResNet(m, bottleneck=False)),
  )
  return next((build for kind, build in builds if isinstance(model, kind)), None)


def to_torch_layout(x: np.ndarray) -> np.ndarray:
  """NHWC batch -> NCHW (other ranks unchanged)."""
  return x.transpose(0, 3, 1, 2) if x.ndim == 4 else x


def check_same_logits(torch_module: nn.Module, apply_fn, variables, x: np.ndarray) -> dict:
  """Compares the logits of both implementations on a batch; raises if they differ.

  Args:
    torch_module: the PyTorch twin (NCHW inputs).
    apply_fn: the rsjax ``apply_fn(variables, x)`` (NHWC inputs).
    variables: its parameters.
    x: ``[b, *input_shape]`` NHWC batch.

  Returns:
    ``{"max_abs_diff", "logit_scale", "argmax_agree"}``.

  Raises:
    AssertionError: when the logits differ by more than 1e-3 of their scale or
      the argmax disagrees on more than one input in a hundred (float32 ties).
  """
  import jax

  ref = np.asarray(jax.jit(apply_fn)(variables, x), np.float64)
  dev = next(torch_module.parameters()).device
  with torch.no_grad():
    xt = torch.from_numpy(np.ascontiguousarray(to_torch_layout(x))).to(dev)
    out = torch_module(xt).double().cpu().numpy()
  diff = float(np.max(np.abs(out - ref)))
  scale = float(np.max(np.abs(ref))) + 1e-12
  agree = float(np.mean(out.argmax(1) == ref.argmax(1)))
  if diff > 1e-3 * max(scale, 1.0) or agree < 0.99:
    raise AssertionError(
      f"PyTorch twin differs from rsjax: max |logit diff| {diff:.3g} (scale {scale:.3g}), "
      f"argmax agreement {agree:.3f}"
    )
  return {"max_abs_diff": diff, "logit_scale": scale, "argmax_agree": agree}
