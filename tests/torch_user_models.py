"""Models a user writes in plain PyTorch, none of them known to rsjax.models by name.

Used by ``tests/test_torch_module.py`` (``rsjax.models.from_torch_module``) and the speed
comparison of docs/guides/torch-module.md (``rsjax bench --twin``). Needs PyTorch.

* ``WideResNet``: Zagoruyko and Komodakis's WRN-d-k (pre-activation basic blocks, 1x1
  shortcut convolutions where the shape changes, average pool 8), CIFAR-sized.
* ``DenseNet``: dense blocks of BN-ReLU-conv1x1-BN-ReLU-conv3x3 layers whose outputs are
  concatenated, transitions with 2x2 average pooling (DenseNet-BC).
* ``ViT``: a small vision transformer: patch embedding (a strided convolution), class token,
  position embeddings, pre-norm blocks of multi-head attention (``scaled_dot_product_attention``)
  and a GELU MLP, LayerNorm, a linear head.
* ``GroupNormNet``: convolutions with GroupNorm and SiLU, max pooling, global mean.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["DenseNet", "GroupNormNet", "ViT", "WideResNet", "randomize_stats_"]


class _WideBlock(nn.Module):
  def __init__(self, cin: int, cout: int, stride: int):
    super().__init__()
    self.bn1, self.conv1 = nn.BatchNorm2d(cin), nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
    self.bn2, self.conv2 = nn.BatchNorm2d(cout), nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
    same = cin == cout and stride == 1
    self.shortcut = None if same else nn.Conv2d(cin, cout, 1, stride, 0, bias=False)

  def forward(self, x):
    o = F.relu(self.bn1(x))
    y = self.conv2(F.relu(self.bn2(self.conv1(o))))
    return y + (x if self.shortcut is None else self.shortcut(o))


class WideResNet(nn.Module):
  """WRN-``depth``-``widen`` for 32x32 inputs."""

  def __init__(self, depth: int = 16, widen: int = 4, num_classes: int = 10):
    super().__init__()
    n = (depth - 4) // 6
    widths = [16, 16 * widen, 32 * widen, 64 * widen]
    self.conv1 = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
    blocks, cin = [], widths[0]
    for i, w in enumerate(widths[1:]):
      for j in range(n):
        blocks.append(_WideBlock(cin, w, 2 if (i > 0 and j == 0) else 1))
        cin = w
    self.blocks = nn.Sequential(*blocks)
    self.bn, self.fc = nn.BatchNorm2d(cin), nn.Linear(cin, num_classes)

  def forward(self, x):
    x = F.relu(self.bn(self.blocks(self.conv1(x))))
    return self.fc(F.avg_pool2d(x, 8).flatten(1))


class _DenseLayer(nn.Module):
  def __init__(self, cin: int, growth: int):
    super().__init__()
    self.bn1, self.conv1 = nn.BatchNorm2d(cin), nn.Conv2d(cin, 4 * growth, 1, bias=False)
    self.bn2, self.conv2 = nn.BatchNorm2d(4 * growth), nn.Conv2d(4 * growth, growth, 3, 1, 1)

  def forward(self, x):
    y = self.conv2(F.relu(self.bn2(self.conv1(F.relu(self.bn1(x))))))
    return torch.cat([x, y], 1)


class DenseNet(nn.Module):
  """DenseNet-BC: ``blocks`` dense blocks of ``layers`` layers, growth ``growth``."""

  def __init__(self, blocks: int = 3, layers: int = 4, growth: int = 12, num_classes: int = 10):
    super().__init__()
    c = 2 * growth
    mods: list[nn.Module] = [nn.Conv2d(3, c, 3, 1, 1, bias=False)]
    for b in range(blocks):
      for _ in range(layers):
        mods.append(_DenseLayer(c, growth))
        c += growth
      if b < blocks - 1:
        mods += [nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2)]
        c //= 2
    self.features = nn.Sequential(*mods, nn.BatchNorm2d(c), nn.ReLU(inplace=True))
    self.fc = nn.Linear(c, num_classes)

  def forward(self, x):
    return self.fc(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


class _Attention(nn.Module):
  def __init__(self, dim: int, heads: int):
    super().__init__()
    self.heads, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

  def forward(self, x):
    b, n, d = x.shape
    q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
    y = F.scaled_dot_product_attention(q, k, v)
    return self.proj(y.transpose(1, 2).reshape(b, n, d))


class _Block(nn.Module):
  def __init__(self, dim: int, heads: int):
    super().__init__()
    self.norm1, self.attn = nn.LayerNorm(dim), _Attention(dim, heads)
    self.norm2 = nn.LayerNorm(dim)
    self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

  def forward(self, x):
    x = x + self.attn(self.norm1(x))
    return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
  """A small ViT: ``patch`` x ``patch`` patches of a ``size`` x ``size`` image."""

  def __init__(
    self,
    size: int = 32,
    patch: int = 4,
    dim: int = 64,
    depth: int = 2,
    heads: int = 4,
    num_classes: int = 10,
  ):
    super().__init__()
    self.embed = nn.Conv2d(3, dim, patch, patch)
    self.cls = nn.Parameter(torch.zeros(1, 1, dim))
    self.pos = nn.Parameter(torch.zeros(1, (size // patch) ** 2 + 1, dim))
    self.blocks = nn.Sequential(*[_Block(dim, heads) for _ in range(depth)])
    self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, num_classes)

  def forward(self, x):
    x = self.embed(x).flatten(2).transpose(1, 2)
    x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
    return self.head(self.norm(self.blocks(x))[:, 0])


class GroupNormNet(nn.Module):
  """Convolutions, GroupNorm, SiLU and max pooling."""

  def __init__(self, width: int = 32, groups: int = 8, num_classes: int = 10):
    super().__init__()
    layers: list[nn.Module] = []
    cin = 3
    for w in (width, 2 * width):
      layers += [nn.Conv2d(cin, w, 3, 1, 1), nn.GroupNorm(groups, w), nn.SiLU()]
      layers += [nn.Conv2d(w, w, 3, 1, 1), nn.GroupNorm(groups, w), nn.SiLU(), nn.MaxPool2d(2)]
      cin = w
    self.features = nn.Sequential(*layers)
    self.fc = nn.Linear(cin, num_classes)

  def forward(self, x):
    return self.fc(self.features(x).mean((2, 3)))


def randomize_stats_(module: nn.Module, seed: int = 0) -> nn.Module:
  """Random BatchNorm statistics and norm affine parameters (in place; a fresh module's are
  0 and 1, which would hide a wrong rule), small random class tokens and position embeddings.
  Returns the module in eval mode."""
  g = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for m in module.modules():
      if isinstance(m, nn.BatchNorm2d):
        m.running_mean.normal_(0.0, 0.1, generator=g)
        m.running_var.uniform_(0.5, 2.0, generator=g)
      if isinstance(m, (nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm)):
        m.weight.uniform_(0.5, 1.5, generator=g)
        m.bias.normal_(0.0, 0.1, generator=g)
    for name, p in module.named_parameters():
      if name in ("cls", "pos"):
        p.normal_(0.0, 0.02, generator=g)
  return module.eval()
