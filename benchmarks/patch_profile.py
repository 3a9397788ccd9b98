"""Where the time of derandomized smoothing goes on the CPU, and what the constant part of a
band's forward could save (issue 72, item 5: rsjax against ART's certified images per second).

The workload is ART's comparison's: LeNet-5 of 2-channel encoded 28x28 digits (column ablation,
every one of the 28 bands a forward pass). Both frameworks run the same network (random weights,
``rsjax.app.bench.torch_models.from_flax`` for PyTorch), cut at its layers, each part one
jitted program (rsjax) or one eager call under ``torch.no_grad`` (PyTorch, all cores), timed
on the previous part's output in ``rounds`` alternated rounds; ms per 1000 forward passes,
median. rsjax runs at ``batch`` (what ``certify_patch`` sends), PyTorch at ART's 128 too.

The saving: at band position ``p`` the encoded image is 0 in every channel outside the band, so
a convolution's output is its bias (and after ReLU and pooling a constant) wherever its
receptive field misses the band. ``variable_fraction`` follows the band's columns through the
layers (5x5 'same' convolution, 2x2 pooling, 5x5 'valid' convolution, pooling): the share of
each part's output columns that depend on the band, averaged over the positions. A forward
that computed only those columns, at the same throughput per column, would take at least
``sum(part time x variable fraction)`` (the dense layers see everything): ``bound_ms``. That is
a lower bound on rsjax's time under any such saving, so ``best_speedup_over_torch`` bounds
what it could reach against PyTorch's forward (ART's time is its forward: 28 passes per
image).
"""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from benchmarks.measure import dump_json

KERNEL = 5


def _columns_after(cols: set[int], width: int, pad: int) -> set[int]:
  """Output columns of a 5-wide convolution (``pad`` each side) reading any of ``cols``."""
  out_w = width + 2 * pad - KERNEL + 1
  return {j for j in range(out_w) if any(0 <= j + t - pad < width and j + t - pad in cols
                                          for t in range(KERNEL))}  # fmt: skip


def variable_fraction(size: int, width: int = 28) -> dict[str, float]:
  """The share of each part's output columns that depend on a band of ``size`` columns,
  averaged over the ``width`` band positions (wrapping, as ``position_masks``)."""
  shares: dict[str, list[float]] = {"conv1": [], "relu_pool1": [], "conv2": [], "relu_pool2": []}
  for p in range(width):
    band = {(p + i) % width for i in range(size)}
    c1 = _columns_after(band, width, 2)  # 28 wide
    p1 = {j // 2 for j in c1}  # 14 wide
    c2 = _columns_after(p1, width // 2, 0)  # 10 wide
    p2 = {j // 2 for j in c2}  # 5 wide
    for name, cols, w in (("conv1", c1, 28), ("relu_pool1", p1, 14), ("conv2", c2, 10),
                          ("relu_pool2", p2, 5)):  # fmt: skip
      shares[name].append(len(cols) / w)
  return {k: float(np.mean(v)) for k, v in shares.items()}


def _rsjax_parts(m):
  pool = lambda x: nnx.max_pool(nnx.relu(x), (2, 2), strides=(2, 2))  # noqa: E731
  return {
    "conv1": jax.jit(m.first_conv),
    "relu_pool1": jax.jit(pool),
    "conv2": jax.jit(lambda x: m.conv2(x)),
    "relu_pool2": jax.jit(pool),
    "fc": jax.jit(lambda x: m.fc3(nnx.relu(m.fc2(nnx.relu(m.fc1(x.reshape(len(x), -1))))))),
  }


def _torch_parts(twin):
  import torch

  layers = [mod for mod in twin.modules() if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear))]
  c1, c2, f1, f2, f3 = layers
  pool = lambda x: torch.nn.functional.max_pool2d(torch.relu(x), 2)  # noqa: E731
  return {
    "conv1": c1,
    "relu_pool1": pool,
    "conv2": c2,
    "relu_pool2": pool,
    "fc": lambda x: f3(torch.relu(f2(torch.relu(f1(x.flatten(1)))))),
  }


def _chain(parts, x, call):
  inputs = {}
  for name, f in parts.items():
    inputs[name] = x
    x = call(f, x)
  return inputs


def _time(f, x, calls: int, batch: int, sync) -> float:
  sync(f(x))
  t = time.perf_counter()
  for _ in range(calls):
    y = f(x)
  sync(y)
  return (time.perf_counter() - t) / calls / batch * 1e6


def patch_profile(
  *,
  size: int = 2,
  batch: int = 1000,
  torch_batch: int = 128,
  rounds: int = 7,
  calls: int = 10,
  seed: int = 0,
  json: str | None = None,
) -> dict:
  """Times the parts in both frameworks (module docstring); returns and writes the figures."""
  import torch

  from rsjax.ablation import encode, position_masks
  from rsjax.app.bench.torch_models import from_flax
  from rsjax.models import LeNet

  torch.set_num_threads(os.cpu_count() or 1)
  load_before = os.getloadavg()[0]
  m = LeNet(input_shape=(28, 28, 2), num_classes=10, normalize=None, rngs=nnx.Rngs(seed))
  twin = from_flax(m, (28, 28, 2))
  masks = position_masks((28, 28, 1), "column", size)
  x = np.random.default_rng(seed).random((batch, 28, 28, 1)).astype(np.float32)
  keep = masks[np.arange(batch) % len(masks)]
  z = np.asarray(encode(jnp.asarray(x), jnp.asarray(keep)))
  arms = {}
  jp = _rsjax_parts(m)
  jp_in = _chain(jp, jnp.asarray(z), lambda f, v: f(v))
  jp["forward"], jp_in["forward"] = jax.jit(lambda v: m(v)), jnp.asarray(z)
  arms["rsjax"] = (jp, jp_in, batch, lambda y: y.block_until_ready())
  tz = torch.from_numpy(np.ascontiguousarray(z.transpose(0, 3, 1, 2)))
  for b in sorted({torch_batch, batch}):
    tp = _torch_parts(twin)
    with torch.no_grad():
      tp_in = _chain(tp, tz[:b], lambda f, v: f(v))
    tp["forward"], tp_in["forward"] = twin, tz[:b]
    arms[f"torch_b{b}"] = (tp, tp_in, b, lambda y: y)
  times = {arm: {name: [] for name in parts} for arm, (parts, _, _, _) in arms.items()}
  with torch.no_grad():
    for _ in range(rounds):
      for arm, (parts, inputs, b, sync) in arms.items():
        for name, f in parts.items():
          times[arm][name].append(_time(f, inputs[name], calls, b, sync))
  ms = {arm: {k: float(np.median(v)) for k, v in t.items()} for arm, t in times.items()}
  frac = variable_fraction(size)
  r = ms["rsjax"]
  bound = sum(r[k] * frac.get(k, 1.0) for k in ("conv1", "relu_pool1", "conv2", "relu_pool2"))
  bound += r["fc"]
  torch_ref = ms[f"torch_b{torch_batch}"]["forward"]
  out = {
    "workload": f"LeNet-5, 28x28x2 encoded digits, column band of {size}, random weights",
    "batch": batch,
    "torch_batch": torch_batch,
    "rounds": rounds,
    "ms_per_1000": ms,
    "macs_per_forward": {
      "conv1": 28 * 28 * 6 * 25 * 2,
      "conv2": 10 * 10 * 16 * 25 * 6,
      "fc": 400 * 120 + 120 * 84 + 84 * 10,
    },  # fmt: skip
    "variable_fraction": frac,
    "bound_ms": float(bound),
    "speedup_now_over_torch": torch_ref / r["forward"],
    "best_speedup_over_torch": torch_ref / bound,
    "jax": jax.__version__,
    "torch": torch.__version__,
    "load_avg_1m": {"start": load_before, "end": os.getloadavg()[0]},
  }
  for arm, v in ms.items():
    print(arm, " ".join(f"{k} {t:.2f}" for k, t in v.items()), "ms per 1000")
  print(f"variable fraction {frac}; rsjax bound {bound:.2f} ms per 1000; rsjax/torch now "
        f"{out['speedup_now_over_torch']:.2f}x, at best {out['best_speedup_over_torch']:.2f}x")  # fmt: skip
  dump_json(json, out)
  return out
