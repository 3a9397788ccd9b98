"""Measured engine/model proposals for the CPU bottlenecks (not used by rsjax itself).

Two changes found by profiling the throughput benchmark, each timed here against
the current code and the PyTorch reference loop, in one process, alternating:

1. ``PairedGaussian``: the same Gaussian transform as ``jax.random.normal``
   (23-bit uniform on (-1, 1), then ``sqrt(2) * erfinv``) but fed by *both*
   32-bit words of each threefry-2x32 block, so one hash makes two normals
   instead of one (``jax.random.bits`` XORs the two words of a block into one
   32-bit value). Noise still depends only on the per-sample key, so counts stay
   identical across batch sizes and devices; the values differ from
   ``jax.random.normal``.
2. ``FastLeNet``: LeNet with its first convolution (1 input channel) written as
   25 shifted multiply-adds per output channel. XLA:CPU's convolution kernel is
   slow for 1 -> 6 channels; the arithmetic is the same (logits agree to ~1e-7).

Command::

  python -m benchmarks.proposals --num 20000 --reps 3
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import time

import numpy as np

try:
  import torch
except ImportError:
  torch = None

import jax  # noqa: E402
import jax.extend.random as jex_random  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

import rsjax  # noqa: E402
from rsjax import models  # noqa: E402
from rsjax import noise as noise_lib  # noqa: E402


@dataclasses.dataclass(frozen=True)
class PairedGaussian(noise_lib.Gaussian):
  """Gaussian noise from both words of each threefry block (see the module docstring)."""

  name: str = "gaussian"

  def sample(self, key, shape, dtype=jnp.float32):
    n = math.prod(shape)
    bits = jex_random.threefry_2x32(jax.random.key_data(key), jnp.arange(n, dtype=jnp.uint32))
    f = jax.lax.bitcast_convert_type((bits >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0
    lo = jnp.nextafter(jnp.float32(-1.0), jnp.float32(1.0))
    u = jnp.maximum(lo, f * (1.0 - lo) + lo)
    z = jnp.float32(math.sqrt(2.0)) * jax.lax.erf_inv(u)
    return z.reshape(shape).astype(dtype)


@dataclasses.dataclass(frozen=True)
class FastLeNet:
  """``apply_fn`` of an ``rsjax.models.LeNet`` with conv1 as shifted multiply-adds."""

  graphdef: object

  def __call__(self, variables, x):
    m = nnx.merge(self.graphdef, variables)
    if m.normalize is not None:
      x = m.normalize(x)
    k, b = m.conv1.kernel[...], m.conv1.bias[...]
    kh, kw, cin, cout = k.shape
    if cin != 1:
      raise ValueError("FastLeNet needs a single input channel")
    h, w = x.shape[1:3]
    xp = jnp.pad(x[..., 0], ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2)))
    outs = []
    for c in range(cout):
      acc = b[c]
      for i in range(kh):
        for j in range(kw):
          acc = acc + xp[:, i:i + h, j:j + w] * k[i, j, 0, c]
      outs.append(acc)
    x = nnx.max_pool(nnx.relu(jnp.stack(outs, -1)), (2, 2), strides=(2, 2))
    x = nnx.max_pool(nnx.relu(m.conv2(x)), (2, 2), strides=(2, 2))
    x = x.reshape(x.shape[0], -1)
    x = nnx.relu(m.fc1(x))
    x = nnx.relu(m.fc2(x))
    return m.fc3(x)


def main(argv=None) -> dict:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--num", type=int, default=20_000)
  p.add_argument("--reps", type=int, default=3)
  p.add_argument("--batch-size", type=int, default=1000)
  args = p.parse_args(argv)
  shape = (28, 28, 1)
  x = np.random.default_rng(0).random((1,) + shape, dtype=np.float32)
  out = {}
  for name in ("mlp", "lenet"):
    model = models.create_model(name, num_classes=10, input_shape=shape, rngs=0)
    apply_fn, variables = models.to_apply_fn(model)
    cfg = {"current": (apply_fn, None), "paired noise": (apply_fn, PairedGaussian())}
    if name == "lenet":
      fast = FastLeNet(apply_fn.graphdef)
      diff = float(jnp.max(jnp.abs(fast(variables, x) - apply_fn(variables, x))))
      print(f"# FastLeNet vs LeNet: max |logit diff| {diff:.2g}")
      cfg["fast conv1"] = (fast, None)
      cfg["fast conv1 + paired noise"] = (fast, PairedGaussian())

    def run(fn, nz, key):
      return rsjax.sample_counts(key, fn, variables, x, sigma=0.25, num_classes=10,
                                 num=args.num, batch_size=args.batch_size,
                                 noise=nz)  # NumPy: already synced

    runs = {k: (lambda r, fn=fn, nz=nz: run(fn, nz, r)) for k, (fn, nz) in cfg.items()}
    if torch is not None:
      from benchmarks import reference_torch as rt
      tmod = rt.from_flax(model, shape)
      tx = torch.from_numpy(np.ascontiguousarray(x[0].transpose(2, 0, 1)))
      for t in dict.fromkeys((os.cpu_count() or 1, 1)):
        runs[f"reference ({t} thread{'s' if t > 1 else ''})"] = (
            lambda r, t=t: (torch.set_num_threads(t), rt.sample_noise_reference(
                tmod, tx, args.num, 400, sigma=0.25, num_classes=10)))
    for k, fn in runs.items():  # warm-up / compile
      fn(0)
    times = {k: [] for k in runs}
    for r in range(args.reps):
      for k, fn in runs.items():
        t0 = time.perf_counter()
        fn(r + 1)
        times[k].append(time.perf_counter() - t0)
    print(f"# {name}: N = {args.num}, batch {args.batch_size}, load {os.getloadavg()[0]:.1f}")
    print("| variant | samples/s (best) | samples/s (median) |")
    print("|---|---|---|")
    for k, ts in times.items():
      out[f"{name}/{k}"] = args.num / min(ts)
      print(f"| {k} | {args.num / min(ts):.0f} | {args.num / statistics.median(ts):.0f} |")
  return out


if __name__ == "__main__":
  main()
