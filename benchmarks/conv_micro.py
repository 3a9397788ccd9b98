"""The 16-channel 3x3 convolution of the CIFAR ResNets' first stage, alone, and its rewrites.

Each case runs one ``jax.jit`` program: a ``fori_loop`` of ``loop`` (10)
convolutions, each feeding the next, on one batch; timed with
``block_until_ready``, best of ``reps`` (3). Every case covers the same ``B``
samples (``batch``, 14,288 by default on a GPU):

* ``base16``: 16 -> 16 channels at 32x32, batch B (the kernel to beat);
* ``pack2``: two samples in the channel axis, block-diagonal 32 -> 32, batch B/2;
* ``pack4``: four samples, block-diagonal 64 -> 64, batch B/4;
* ``pad32``: the 16 channels zero-padded to 32 (in and out), batch B;
* ``group2``: ``feature_group_count=2`` over the 2-packed 32 channels, batch B/2;
* ``s2_32``: 32 -> 32 at 16x16, batch B (the second stage, the rate to reach).

Each with the epilogues ``plain`` (the convolution alone), ``bias_relu``
(``relu(conv + b)``) and ``bias_res_relu`` (``relu(conv + b + x)``): the two
patterns that XLA's cuDNN fused-convolution rewriter turns into one cuDNN call
when batch norm is folded. Running the command again with
``XLA_FLAGS=--xla_disable_hlo_passes=cudnn-fused-convolution-rewriter`` (``tag``
names the row set) gives the same cases unfused.

Reported per case: ms per convolution, executed FLOPs (``rsjax.app.bench.costs``: 2 x
MACs, so packing counts its zero blocks) and TFLOP/s, the useful TFLOP/s (the
base case's FLOPs over the same B samples), the bytes one convolution must move
(input, output, residual, weights) and the GB/s that makes. ``check`` first
runs every rewrite at a small batch (16) and prints the largest difference of its
unpacked output from the base case's (equal up to rounding).

The command: ``benchmarks/configs/conv_micro.py`` (the lease's stage s1).
"""

from __future__ import annotations

import dataclasses
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.measure import dump_json
from rsjax.app.bench.costs import op_costs

CHANNELS = 16
EPILOGUES = ("plain", "bias_relu", "bias_res_relu")
DTYPES = {"bf16": jnp.bfloat16, "fp32": jnp.float32}


@dataclasses.dataclass(frozen=True)
class Case:
  """One layout of the stage's convolution: ``pack`` samples per batch row, ``cin == cout``."""

  name: str
  size: int  # height = width
  pack: int  # samples per row of the batch
  channels: int  # input and output channels of the convolution
  groups: int = 1


CASES = (
  Case("base16", 32, 1, CHANNELS),
  Case("pack2", 32, 2, 2 * CHANNELS),
  Case("pack4", 32, 4, 4 * CHANNELS),
  Case("pad32", 32, 1, 2 * CHANNELS),
  Case("group2", 32, 2, 2 * CHANNELS, groups=2),
  Case("s2_32", 16, 1, 2 * CHANNELS),
)


def base_weights(seed: int = 0, channels: int = CHANNELS) -> tuple[np.ndarray, np.ndarray]:
  """A 3x3 ``channels -> channels`` kernel (HWIO, variance-preserving) and a bias."""
  rng = np.random.default_rng(seed)
  w = rng.standard_normal((3, 3, channels, channels)) / np.sqrt(9 * channels)
  return w.astype(np.float32), (0.1 * rng.standard_normal(channels)).astype(np.float32)


def case_weights(case: Case, w: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """The kernel and bias of ``case`` made from the base 16-channel ``w``, ``b``."""
  if case.name == "s2_32":
    return base_weights(1, case.channels)
  c = w.shape[-1]
  if case.groups > 1:  # each group's kernel [3, 3, c, c], groups stacked on the output axis
    return np.concatenate([w] * case.groups, axis=-1), np.tile(b, case.groups)
  k = np.zeros((3, 3, case.channels, case.channels), np.float32)
  bias = np.zeros(case.channels, np.float32)
  for g in range(case.pack):  # block-diagonal; pad32 (pack 1) keeps one block, zeros around it
    k[:, :, g * c : (g + 1) * c, g * c : (g + 1) * c] = w
    bias[g * c : (g + 1) * c] = b
  return k, bias


def pack_input(case: Case, x: np.ndarray) -> np.ndarray:
  """``[B, H, W, 16]`` samples in ``case``'s layout (``[B / pack, H, W, channels]``)."""
  n, h, wd, c = x.shape
  if case.pack > 1:
    x = x.reshape(n // case.pack, case.pack, h, wd, c).transpose(0, 2, 3, 1, 4)
    return x.reshape(n // case.pack, h, wd, case.pack * c)
  pad = case.channels - c
  return np.pad(x, ((0, 0), (0, 0), (0, 0), (0, pad))) if pad else x


def unpack_output(case: Case, y: np.ndarray, c: int = CHANNELS) -> np.ndarray:
  """The inverse of :func:`pack_input`: ``[B, H, W, 16]``."""
  m, h, wd, _ = y.shape
  if case.pack > 1:
    y = y.reshape(m, h, wd, case.pack, c).transpose(0, 3, 1, 2, 4)
    return y.reshape(m * case.pack, h, wd, c)
  return y[..., :c]


def conv(x, w, groups: int = 1):
  """A 3x3 SAME convolution, NHWC / HWIO, stride 1."""
  return jax.lax.conv_general_dilated(
    x,
    w,
    window_strides=(1, 1),
    padding="SAME",
    dimension_numbers=("NHWC", "HWIO", "NHWC"),
    feature_group_count=groups,
  )


def step(x, w, b, epilogue: str, groups: int = 1):
  """One convolution with its epilogue (the patterns of the fused-convolution rewriter)."""
  y = conv(x, w, groups)
  if epilogue == "plain":
    return y
  y = y + b
  if epilogue == "bias_res_relu":
    y = y + x
  return jnp.maximum(y, 0)


def program(epilogue: str, groups: int, loop: int):
  """The jitted ``fori_loop`` of ``loop`` steps."""

  def run(x, w, b):
    return jax.lax.fori_loop(0, loop, lambda _, v: step(v, w, b, epilogue, groups), x)

  return jax.jit(run)


def conv_flops(case: Case, w: np.ndarray, dtype) -> int:
  """FLOPs of one convolution of one batch row (``rsjax.app.bench.costs``: 2 x MACs)."""
  shape = (case.size, case.size, case.channels)
  wt = jax.ShapeDtypeStruct(w.shape, dtype)
  return op_costs(lambda k, x: conv(x, k, case.groups), wt, shape, dtype)[0]


def conv_bytes(case: Case, rows: int, w: np.ndarray, itemsize: int, epilogue: str) -> int:
  """Bytes one convolution must move: input, output, the residual when read, the weights."""
  act = rows * case.size * case.size * case.channels * itemsize
  reads = 2 if epilogue == "bias_res_relu" else 1  # the residual is the input, read twice
  return act * (reads + 1) + w.size * itemsize


def _inputs(case: Case, batch: int, dtype, seed: int = 0):
  x = np.random.default_rng(seed).random((batch, case.size, case.size, CHANNELS), np.float32)
  if case.name == "s2_32":
    x = np.random.default_rng(seed).random((batch, case.size, case.size, case.channels))
  else:
    x = pack_input(case, x)
  return jnp.asarray(x, dtype)


def time_case(case: Case, epilogue: str, *, batch: int, dtype, loop: int, reps: int) -> dict:
  """Best-of-``reps`` time of the case's loop; its FLOPs, bytes and rates."""
  w16, b16 = base_weights()
  w, b = case_weights(case, w16, b16)
  x = _inputs(case, batch, dtype)
  wj, bj = jnp.asarray(w, dtype), jnp.asarray(b, dtype)
  fn = program(epilogue, case.groups, loop)
  t = time.perf_counter()
  fn(x, wj, bj).block_until_ready()  # compile (and autotune) + first run
  first = time.perf_counter() - t
  best = float("inf")
  for _ in range(reps):
    t = time.perf_counter()
    fn(x, wj, bj).block_until_ready()
    best = min(best, time.perf_counter() - t)
  rows = x.shape[0]
  ms = best / loop * 1e3
  flops = conv_flops(case, w, dtype) * rows
  useful = conv_flops(CASES[0], w16, dtype) * batch if case.name != "s2_32" else flops
  nbytes = conv_bytes(case, rows, w, jnp.dtype(dtype).itemsize, epilogue)
  return {
    "case": case.name,
    "epilogue": epilogue,
    "batch_rows": rows,
    "samples": batch,
    "channels": case.channels,
    "size": case.size,
    "groups": case.groups,
    "first_call_s": first,
    "ms_per_conv": ms,
    "flops_per_conv": flops,
    "tflops": flops / (ms * 1e-3) / 1e12,
    "useful_tflops": useful / (ms * 1e-3) / 1e12,
    "bytes_per_conv": nbytes,
    "gbytes_per_s": nbytes / (ms * 1e-3) / 1e9,
  }


def check_rewrites(dtype, *, batch: int = 16, loop: int = 2) -> dict:
  """Max |difference| of each rewrite's unpacked output from the base case's, per epilogue."""
  w16, b16 = base_weights()
  out = {}
  for epilogue in EPILOGUES:
    fn0 = program(epilogue, 1, loop)
    ref = np.asarray(fn0(_inputs(CASES[0], batch, dtype), w16.astype(dtype), b16.astype(dtype)))
    ref = ref.astype(np.float32)
    scale = float(np.max(np.abs(ref))) or 1.0
    for case in CASES[1:5]:
      w, b = case_weights(case, w16, b16)
      fn = program(epilogue, case.groups, loop)
      y = np.asarray(fn(_inputs(case, batch, dtype), jnp.asarray(w, dtype), jnp.asarray(b, dtype)))
      diff = float(np.max(np.abs(unpack_output(case, y.astype(np.float32)) - ref)))
      out[f"{case.name}/{epilogue}"] = {"max_abs_diff": diff, "scale": scale}
  return out


def conv_micro(
  *,
  batch: int | None = None,
  precision: str = "bf16",
  cases: str = ",".join(c.name for c in CASES),
  epilogues: str = ",".join(EPILOGUES),
  loop: int = 10,
  reps: int = 3,
  check: bool = False,
  tag: str = "default",
  json: str | None = None,
) -> dict:
  """Times ``cases`` x ``epilogues`` at ``batch`` samples (default 14,288 on a GPU, 16
  elsewhere; a multiple of 4), ``loop`` convolutions a program, best of ``reps``; ``check``:
  the rewrites equal the base case first; ``tag`` names the row set (e.g. "unfused")."""
  batch = batch or (14_288 if jax.default_backend() == "gpu" else 16)
  dtype = DTYPES[precision]
  if batch % 4:
    raise SystemExit("batch must be a multiple of 4 (the 4-packed case)")
  res = {
    "tag": tag, "precision": precision, "batch": batch, "loop": loop,
    "device": str(jax.devices()[0]), "xla_flags": os.environ.get("XLA_FLAGS", ""),
  }  # fmt: skip
  if check:
    res["check"] = check_rewrites(dtype)
    for k, v in res["check"].items():
      print(f"check {k}: max |diff| {v['max_abs_diff']:.3g} (scale {v['scale']:.3g})", flush=True)
  by_name = {c.name: c for c in CASES}
  rows = []
  for name in cases.split(","):
    for epilogue in epilogues.split(","):
      r = time_case(by_name[name], epilogue, batch=batch, dtype=dtype, loop=loop, reps=reps)
      rows.append(dict(r, tag=tag))
      print(
        f"{tag:8s} {name:7s} {epilogue:14s} {r['ms_per_conv']:8.3f} ms  "
        f"{r['tflops']:7.2f} TFLOP/s (useful {r['useful_tflops']:7.2f})  "
        f"{r['gbytes_per_s']:8.1f} GB/s  first {r['first_call_s']:.2f} s",
        flush=True,
      )
  res["rows"] = rows
  dump_json(json, res)
  return res
