"""LeNet-5's forward on the CPU cut at its layers, and the YNNPACK size cutoff of its second
convolution (issue 66).

rsjax's LeNet-5 (``rsjax.models.LeNet``, random weights, 28x28x1, batch ``batch``) as one jitted
program per part, each timed on the previous part's output: ``conv1`` (normalization and the
one-channel 5x5 convolution, ``rsjax.models.few_channel_conv``), ``relu_pool1``, ``conv2``
(6 -> 16, 5x5), ``relu_pool2``, ``fc`` (the three dense layers) and ``forward`` (the whole
model, one program). Then the second convolution alone with its output channels zero-padded to
17, 24 and 32 (``conv2_out17``...; sliced back to 16) and its input channels padded to 17
(``conv2_in17``): XLA:CPU hands a convolution to YNNPACK only when its larger channel count
exceeds 16 (``IsConvolutionOpSupportedByYnn`` in XLA's ``ynn_support.cc``), so these run on
YNNPACK, the plain one on Eigen. Every part is timed in ``rounds`` alternated rounds of
``calls`` calls; ms per 1000 samples, median and minimum.

The command: ``benchmarks/configs/cpu_lenet_layers.py``.
"""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from benchmarks.measure import dump_json
from rsjax.models import LeNet


def _pool(x: jax.Array) -> jax.Array:
  return nnx.max_pool(nnx.relu(x), (2, 2), strides=(2, 2))


def _conv2_padded(m: LeNet, cout: int, cin: int):
  """The second convolution with ``cout`` output and ``cin`` input channels, zero-padded."""
  w, b = m.conv2.kernel[...], m.conv2.bias[...]
  w = jnp.pad(w, ((0, 0), (0, 0), (0, cin - w.shape[2]), (0, cout - w.shape[3])))

  def f(x):
    x = jnp.pad(x, ((0, 0), (0, 0), (0, 0), (0, cin - x.shape[-1])))
    dims = ("NHWC", "HWIO", "NHWC")
    y = jax.lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=dims)
    return y[..., : b.shape[0]] + b

  return jax.jit(f)


def lenet_layers(
  *, batch: int = 1000, rounds: int = 7, calls: int = 10, seed: int = 0, json: str | None = None
) -> dict:
  """Times the parts (module docstring); returns and writes ``{part: {median, min}}`` in ms
  per 1000 samples, with the largest difference of each padded convolution from the plain
  and the machine's 1-minute load average at the start and the end."""
  load_before = os.getloadavg()[0]
  m = LeNet(input_shape=(28, 28, 1), num_classes=10, rngs=nnx.Rngs(seed))
  x = jax.random.uniform(jax.random.key(seed), (batch, 28, 28, 1))
  parts = {
    "conv1": jax.jit(lambda x: m.first_conv(m.normalize(x))),
    "relu_pool1": jax.jit(_pool),
    "conv2": jax.jit(lambda x: m.conv2(x)),
    "relu_pool2": jax.jit(_pool),
    "fc": jax.jit(lambda x: m.fc3(nnx.relu(m.fc2(nnx.relu(m.fc1(x.reshape(len(x), -1))))))),
  }
  inputs = {}
  for name, f in parts.items():
    inputs[name] = x
    x = f(x)
  parts["forward"], inputs["forward"] = jax.jit(lambda x: m(x)), inputs["conv1"]
  plain = parts["conv2"](inputs["conv2"])
  diff = {}
  for cout, cin in ((17, 6), (24, 6), (32, 6), (16, 17)):
    name = f"conv2_out{cout}" if cin == 6 else f"conv2_in{cin}"
    parts[name], inputs[name] = _conv2_padded(m, cout, cin), inputs["conv2"]
    diff[name] = float(jnp.abs(parts[name](inputs[name]) - plain).max())
  times = {name: [] for name in parts}
  for _ in range(rounds):
    for name, f in parts.items():
      f(inputs[name]).block_until_ready()
      t = time.perf_counter()
      for _ in range(calls):
        y = f(inputs[name])
      y.block_until_ready()
      times[name].append((time.perf_counter() - t) / calls / batch * 1e6)
  out = {
    "batch": batch,
    "rounds": rounds,
    "ms_per_1000": {
      k: {"median": float(np.median(v)), "min": float(np.min(v))} for k, v in times.items()
    },
    "max_abs_diff_from_conv2": diff,
    "jax": jax.__version__,
    "load_avg_1m": {"start": load_before, "end": os.getloadavg()[0]},
  }
  for k, v in out["ms_per_1000"].items():
    print(f"{k:12s} {v['median']:7.2f} ({v['min']:.2f}) ms per 1000 samples")
  dump_json(json, out)
  return out
