"""PyTorch twins of the architectures of published smoothed classifiers, in their own layouts.

Each module here has the parameter and buffer names, shapes and forward pass of
the code that wrote the published checkpoints, so its ``state_dict()`` is a
checkpoint as that code writes it (written from scratch after the originals):

* ``NormalizeLayer``: Cohen et al.'s (``code/datasets.py``): means and stds are
  plain tensors, *not* buffers, so they are absent from the state dict.
* ``CifarResNet``: Cohen et al.'s ``archs/cifar_resnet.py`` (bearpaw's CIFAR
  ResNet): 3x3 stem with 16 channels, stages ``layer1..3`` of basic blocks
  (16, 32, 64 channels), ``downsample = Sequential(conv1x1(stride), BN)`` when
  the shape changes, ``AvgPool2d(8)``, ``fc``.
* ``TorchvisionResNet``: torchvision's ``ResNet`` (v1.5): ``conv1`` 7x7/2 pad 3,
  ``bn1``, max-pool 3/2 pad 1, ``layer1..4``, adaptive average pool, ``fc``;
  the bottleneck's stride is on its 3x3 ``conv2``.
* ``LeNet``: the MNIST LeNet of Consistency and MACER (conv 20, conv 50, fc 500).
* ``cohen_model(arch)``: ``Sequential(NormalizeLayer, model)`` as in
  ``get_architecture``, ImageNet models inside ``DataParallel``.

Used by the converter tests (``rsjax.models.from_torch``, ``tests/test_torch_convert.py``). Needs PyTorch; rsjax itself never imports this module.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

__all__ = [
  "CifarResNet",
  "LeNet",
  "NormalizeLayer",
  "TorchvisionResNet",
  "cohen_model",
  "randomize_",
]

CIFAR10 = ([0.4914, 0.4822, 0.4465], [0.2023, 0.1994, 0.2010])
IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])


class NormalizeLayer(nn.Module):
  """``(x - mean) / sd`` per channel of an NCHW batch; the constants are not in the state dict."""

  def __init__(self, means, sds):
    super().__init__()
    self.means = torch.tensor(means)
    self.sds = torch.tensor(sds)

  def forward(self, x):
    return (x - self.means.view(1, -1, 1, 1)) / self.sds.view(1, -1, 1, 1)


def _conv(cin, cout, k, stride=1):
  return nn.Conv2d(cin, cout, k, stride=stride, padding=(k - 1) // 2, bias=False)


class BasicBlock(nn.Module):
  expansion = 1

  def __init__(self, cin, planes, stride=1, downsample=None):
    super().__init__()
    self.conv1, self.bn1 = _conv(cin, planes, 3, stride), nn.BatchNorm2d(planes)
    self.conv2, self.bn2 = _conv(planes, planes, 3), nn.BatchNorm2d(planes)
    self.downsample = downsample

  def forward(self, x):
    out = F.relu(self.bn1(self.conv1(x)))
    out = self.bn2(self.conv2(out))
    return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class Bottleneck(nn.Module):
  expansion = 4

  def __init__(self, cin, planes, stride=1, downsample=None):
    super().__init__()
    self.conv1, self.bn1 = _conv(cin, planes, 1), nn.BatchNorm2d(planes)
    self.conv2, self.bn2 = _conv(planes, planes, 3, stride), nn.BatchNorm2d(planes)
    self.conv3, self.bn3 = _conv(planes, planes * 4, 1), nn.BatchNorm2d(planes * 4)
    self.downsample = downsample

  def forward(self, x):
    out = F.relu(self.bn1(self.conv1(x)))
    out = F.relu(self.bn2(self.conv2(out)))
    out = self.bn3(self.conv3(out))
    return F.relu(out + (x if self.downsample is None else self.downsample(x)))


def _stage(block, cin, planes, n, stride):
  """``(nn.Sequential of n blocks, output channels)``; a projection when the shape changes."""
  cout = planes * block.expansion
  down = None
  if stride != 1 or cin != cout:
    down = nn.Sequential(_conv(cin, cout, 1, stride), nn.BatchNorm2d(cout))
  blocks = [block(cin, planes, stride, down)] + [block(cout, planes) for _ in range(n - 1)]
  return nn.Sequential(*blocks), cout


class CifarResNet(nn.Module):
  """Basic-block CIFAR ResNet of depth 6n + 2 (Cohen et al.'s ``resnet(depth=...)``)."""

  def __init__(self, depth=110, num_classes=10):
    super().__init__()
    n = (depth - 2) // 6
    self.conv1, self.bn1 = nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
    self.layer1, c = _stage(BasicBlock, 16, 16, n, 1)
    self.layer2, c = _stage(BasicBlock, c, 32, n, 2)
    self.layer3, c = _stage(BasicBlock, c, 64, n, 2)
    self.avgpool = nn.AvgPool2d(8)
    self.fc = nn.Linear(c, num_classes)

  def forward(self, x):
    x = F.relu(self.bn1(self.conv1(x)))
    x = self.layer3(self.layer2(self.layer1(x)))
    return self.fc(self.avgpool(x).flatten(1))


class TorchvisionResNet(nn.Module):
  """torchvision's ``ResNet(block, layers)``: ``resnet18`` = (BasicBlock, [2, 2, 2, 2]),
  ``resnet50`` = (Bottleneck, [3, 4, 6, 3])."""

  def __init__(self, block, layers, num_classes=1000):
    super().__init__()
    self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
    self.bn1 = nn.BatchNorm2d(64)
    self.relu = nn.ReLU(inplace=True)
    self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
    c = 64
    self.layer1, c = _stage(block, c, 64, layers[0], 1)
    self.layer2, c = _stage(block, c, 128, layers[1], 2)
    self.layer3, c = _stage(block, c, 256, layers[2], 2)
    self.layer4, c = _stage(block, c, 512, layers[3], 2)
    self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
    self.fc = nn.Linear(c, num_classes)

  def forward(self, x):
    x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
    x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
    return self.fc(torch.flatten(self.avgpool(x), 1))


class LeNet(nn.Module):
  """conv5x5(20) - relu - maxpool2 - conv5x5(50) - relu - maxpool2 - fc500 - relu - fc.

  For 28x28 inputs.
  """

  def __init__(self, num_classes=10):
    super().__init__()
    self.conv1 = nn.Conv2d(1, 20, 5, 1)
    self.conv2 = nn.Conv2d(20, 50, 5, 1)
    self.fc1 = nn.Linear(4 * 4 * 50, 500)
    self.fc2 = nn.Linear(500, num_classes)

  def forward(self, x):
    x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
    x = F.max_pool2d(F.relu(self.conv2(x)), 2, 2)
    return self.fc2(F.relu(self.fc1(x.reshape(-1, 4 * 4 * 50))))


def cohen_model(arch: str, num_classes: int | None = None) -> nn.Module:
  """``Sequential(NormalizeLayer, model)`` as Cohen et al.'s ``get_architecture`` builds it.

  Args:
    arch: "cifar_resnet20", "cifar_resnet110" (CIFAR-10 normalization),
      "resnet18", "resnet50" (ImageNet normalization, inside ``DataParallel``)
      or "lenet" (MNIST: no normalization, ``nn.Identity`` as in Consistency).
    num_classes: default 10 (CIFAR, MNIST) or 1000 (ImageNet).
  """
  if arch.startswith("cifar_resnet"):
    model = CifarResNet(int(arch[len("cifar_resnet") :]), num_classes or 10)
    return nn.Sequential(NormalizeLayer(*CIFAR10), model)
  if arch in ("resnet18", "resnet50"):
    block, layers = (BasicBlock, [2, 2, 2, 2]) if arch == "resnet18" else (Bottleneck, [3, 4, 6, 3])
    model = nn.DataParallel(TorchvisionResNet(block, layers, num_classes or 1000))
    return nn.Sequential(NormalizeLayer(*IMAGENET), model)
  if arch == "lenet":
    return nn.Sequential(nn.Identity(), LeNet(num_classes or 10))
  raise ValueError(f"unknown arch {arch!r}")


def randomize_(module: nn.Module, generator: torch.Generator) -> nn.Module:
  """Random weights and BatchNorm statistics (in place), scaled to keep deep nets' activations O(1).

  Convolutions and linear layers: He-normal on fan-in (biases N(0, 0.1));
  BatchNorm: weight U(0.5, 1), bias N(0, 0.1), running mean N(0, 0.1), running
  variance U(0.5, 2). Returns the module in eval mode.
  """
  with torch.no_grad():
    for m in module.modules():
      if isinstance(m, (nn.Conv2d, nn.Linear)):
        fan_in = m.weight[0].numel()
        m.weight.normal_(0.0, (2.0 / fan_in) ** 0.5, generator=generator)
        if m.bias is not None:
          m.bias.normal_(0.0, 0.1, generator=generator)
      elif isinstance(m, nn.BatchNorm2d):
        m.weight.uniform_(0.5, 1.0, generator=generator)
        m.bias.normal_(0.0, 0.1, generator=generator)
        m.running_mean.normal_(0.0, 0.1, generator=generator)
        m.running_var.uniform_(0.5, 2.0, generator=generator)
        m.num_batches_tracked.fill_(7)
  return module.eval()
