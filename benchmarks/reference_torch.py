"""PyTorch reference: Cohen et al.'s sampling loop and the rsjax models in PyTorch.

This is the baseline the throughput benchmark compares against. It has three parts:

* ``sample_noise_reference``: a faithful re-implementation of
  ``Smooth._sample_noise`` of the reference code (``locuslab/smoothing``,
  ``code/core.py``): for each batch of ``batch_size`` (400 in the paper runs) it
  repeats the image (``x.repeat``), draws ``torch.randn_like(batch) * sigma``,
  runs the base classifier in float32 under ``torch.no_grad()``, takes the
  ``argmax``, copies the predictions to the host (``.cpu().numpy()``) and counts
  them with a Python loop. The only change is the device: the reference asks for
  ``device='cuda'``; here the noise is made on the device of the input.
* ``from_flax``: builds a ``torch.nn.Module`` equal to an ``rsjax.models`` NNX
  model (MLP, CNN, LeNet, the CIFAR basic-block ResNets, ResNet-50), copying its
  weights, so both sides run *the same network with the same weights*. Inputs of
  the PyTorch modules are NCHW (as in the reference); flattening layers permute
  their weights so that the NCHW flatten order matches Flax's NHWC order.
* ``tuned_module`` / ``tuned_counts`` / ``tuned_certify``: the *tuned* twin of
  PERFORMANCE.md section 6 (baseline b): the same network and weights on the
  fastest PyTorch path we know: noise drawn on the device and added by
  broadcasting (no ``repeat``), one large batch, channels-last memory format,
  optional bfloat16 autocast and ``torch.compile``, counting on the device
  (``scatter_add_``, no host sync until the counts are read), cuDNN autotuning.

PyTorch is a benchmark-only extra (``pip install torch``); rsjax never imports it.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["sample_noise_reference", "from_flax", "check_same_logits", "tuned_module",
           "tuned_counts", "tuned_certify"]


# ------------------------------------------------------------------------------------------------
# The reference sampling loop (Cohen et al., ``Smooth._sample_noise`` / ``_count_arr``).
# ------------------------------------------------------------------------------------------------


def _count_arr(arr: np.ndarray, length: int) -> np.ndarray:
  counts = np.zeros(length, dtype=int)
  for idx in arr:
    counts[idx] += 1
  return counts


def sample_noise_reference(base_classifier: nn.Module, x: torch.Tensor, num: int, batch_size: int,
                           *, sigma: float, num_classes: int) -> np.ndarray:
  """Class counts of ``num`` noisy copies of one input, as the reference code computes them.

  Args:
    base_classifier: module mapping ``[b, C, H, W]`` (or ``[b, *shape]``) to logits.
    x: one input ``[C, H, W]`` (no batch axis), as in the reference.
    num: number of samples.
    batch_size: forward batch (400 in Cohen et al.'s runs).
    sigma: Gaussian noise standard deviation.
    num_classes: number of classes.

  Returns:
    ``[num_classes]`` int counts (NumPy).
  """
  base_classifier.eval()
  with torch.no_grad():
    counts = np.zeros(num_classes, dtype=int)
    for _ in range(math.ceil(num / batch_size)):
      this_batch_size = min(batch_size, num)
      num -= this_batch_size
      batch = x.repeat((this_batch_size,) + (1,) * x.dim())
      noise = torch.randn_like(batch, device=x.device) * sigma
      predictions = base_classifier(batch + noise).argmax(1)
      counts += _count_arr(predictions.cpu().numpy(), num_classes)
    return counts


# ------------------------------------------------------------------------------------------------
# PyTorch twins of the rsjax.models architectures.
# ------------------------------------------------------------------------------------------------


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
  conv = nn.Conv2d(cin, cout, (kh, kw), stride=strides, padding=(pt, pl),
                   bias=flax_conv.bias is not None)
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
        [_linear(layer, permute_from=perm if i == 0 else None) for i, layer in enumerate(m.hidden)])
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
    self.shortcut = (nn.Sequential(_conv(b.proj_conv), _bn(b.proj_bn))
                     if b.proj_conv is not None else nn.Identity())

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
  from rsjax import models  # local import: the benchmark imports torch first

  input_shape = tuple(int(s) for s in input_shape)
  if isinstance(model, models.MLP):
    mod = MLP(model, input_shape)
  elif isinstance(model, models.LeNet):
    mod = LeNet(model, input_shape)
  elif isinstance(model, models.CNN):
    mod = CNN(model, input_shape)
  elif isinstance(model, models.ResNet50):
    mod = ResNet(model, bottleneck=True)
  elif isinstance(model, models.BasicResNet):
    mod = ResNet(model, bottleneck=False)
  else:
    raise ValueError(f"no PyTorch twin for {type(model).__name__}")
  return mod.eval()


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
        f"argmax agreement {agree:.3f}")
  return {"max_abs_diff": diff, "logit_scale": scale, "argmax_agree": agree}


# ------------------------------------------------------------------------------------------------
# The tuned twin (PERFORMANCE.md section 6, baseline b).
# ------------------------------------------------------------------------------------------------


def torch_device() -> torch.device:
  """The first CUDA device when there is one, else the CPU."""
  return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def torch_generator(seed: int) -> torch.Generator:
  return torch.Generator(device=torch_device()).manual_seed(int(seed))


def reset_peak_memory() -> None:
  if torch.cuda.is_available():
    torch.cuda.reset_peak_memory_stats()


def peak_memory_mb() -> float | None:
  """Peak CUDA memory allocated by PyTorch since the last reset (None on a CPU)."""
  return torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None


def tuned_module(model, input_shape, *, compile_mode: str = "none") -> tuple[nn.Module, str]:
  """The PyTorch twin of an ``rsjax.models`` model, set up for speed on :func:`torch_device`.

  Args:
    model: an NNX model from ``rsjax.models``.
    input_shape: shape of one input as rsjax sees it (``(H, W, C)``).
    compile_mode: ``"none"`` or a ``torch.compile`` mode (``"default"``,
      ``"reduce-overhead"``, ``"max-autotune"``, ...).

  Returns:
    ``(module, compile)``: the module (channels-last for images) and the compile
    mode in effect (``"none (Error)"`` when ``torch.compile`` is unavailable).
  """
  dev = torch_device()
  mod = from_flax(model, input_shape).to(dev)
  if len(input_shape) == 3:
    mod = mod.to(memory_format=torch.channels_last)
  if dev.type == "cuda":
    torch.backends.cudnn.benchmark = True
  if compile_mode == "none":
    return mod, "none"
  try:
    compiled = torch.compile(mod, mode=None if compile_mode == "default" else compile_mode)
    with torch.inference_mode():  # compile errors surface on the first call
      compiled(torch.zeros((2,) + _torch_shape(input_shape), device=dev))
  except Exception as e:  # noqa: BLE001 - no compiler toolchain: eager is the twin
    return mod, f"none ({type(e).__name__})"
  return compiled, compile_mode


def _torch_shape(input_shape) -> tuple[int, ...]:
  s = tuple(int(v) for v in input_shape)
  return (s[2], s[0], s[1]) if len(s) == 3 else s


def tuned_counts(module: nn.Module, x: np.ndarray, num: int, batch_size: int, *, sigma: float,
                 num_classes: int, autocast_dtype: str = "fp32",
                 generator: torch.Generator | None = None) -> np.ndarray:
  """Class counts of ``num`` noisy copies of one input, computed on the module's device.

  Args:
    module: from :func:`tuned_module`.
    x: one input in rsjax's layout (``[H, W, C]``), NumPy.
    num: samples.
    batch_size: forward batch (every batch is full; the extra rows of the last
      one are not counted).
    sigma: Gaussian noise standard deviation.
    num_classes: number of classes.
    autocast_dtype: ``"fp32"`` (full-precision float32: TF32 off for matmuls and
      cuDNN convolutions), ``"tf32"`` (TF32 on for both) or ``"bf16"``
      (``torch.autocast``), as rsjax's declared precisions.
    generator: a ``torch.Generator`` on the module's device.

  Returns:
    ``[num_classes]`` int64 counts (NumPy); the only host sync is reading them.
  """
  tf32 = autocast_dtype == "tf32"
  torch.backends.cuda.matmul.allow_tf32 = tf32
  torch.backends.cudnn.allow_tf32 = tf32
  dev = next(module.parameters()).device
  xt = torch.from_numpy(np.ascontiguousarray(to_torch_layout(np.asarray(x, np.float32)[None])))[0]
  xt = xt.to(dev)
  b = min(int(batch_size), int(num))
  counts = torch.zeros(num_classes, dtype=torch.int64, device=dev)
  ones = torch.ones(b, dtype=torch.int64, device=dev)
  image = xt.dim() == 3
  with torch.inference_mode(), torch.autocast(dev.type, dtype=torch.bfloat16,
                                              enabled=autocast_dtype == "bf16"):
    for start in range(0, num, b):
      noise = torch.randn((b,) + tuple(xt.shape), device=dev, generator=generator)
      batch = torch.addcmul(xt, noise, torch.tensor(sigma, device=dev))
      if image:
        batch = batch.contiguous(memory_format=torch.channels_last)
      pred = module(batch).argmax(1)
      k = min(b, num - start)
      counts.scatter_add_(0, pred[:k], ones[:k])
  return counts.cpu().numpy()


def tuned_certify(module: nn.Module, x: np.ndarray, *, n0: int, n: int, alpha: float,
                  sigma: float, num_classes: int, batch_size: int, autocast_dtype: str = "fp32",
                  generator: torch.Generator | None = None) -> tuple[int, float]:
  """Cohen et al.'s CERTIFY for one input with :func:`tuned_counts`.

  Returns:
    ``(prediction, radius)``; ``(-1, 0.0)`` when it abstains. The statistics are
    rsjax's (one-sided Clopper-Pearson, ``sigma * Phi^-1(p_lower)``).
  """
  from rsjax import stats  # local import: the benchmark imports torch first

  kw = dict(sigma=sigma, num_classes=num_classes, autocast_dtype=autocast_dtype,
            generator=generator)
  top = int(np.argmax(tuned_counts(module, x, n0, batch_size, **kw)))
  k = int(tuned_counts(module, x, n, batch_size, **kw)[top])
  p_lower = float(stats.clopper_pearson_lower(k, n, alpha))
  if p_lower < 0.5:
    return -1, 0.0
  return top, float(stats.gaussian_radius(p_lower, sigma))
