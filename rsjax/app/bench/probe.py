"""The peaks of a CPU, measured: a timed float32 (and bfloat16) matmul gives its FLOP/s, a timed
large copy its memory bandwidth. No vendor table covers every CPU, and a CPU shared with other
work delivers less than its datasheet anyway: the probe measures what this process gets now."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from rsjax.app.bench import rounds
from rsjax.app.bench.peaks import Peaks

__all__ = ["best_seconds", "copy_bandwidth", "cpu_peaks", "matmul_flops_per_s"]


def best_seconds(fn: Callable[[], Any], *, repeats: int = 5, min_seconds: float = 0.2) -> float:
  """The shortest of ``repeats`` timed calls of ``fn`` (it blocks on its result), after one
  untimed call (compilation); more calls while the total is under ``min_seconds``."""
  jax.block_until_ready(fn())
  best, total, calls = float("inf"), 0.0, 0
  while calls < repeats or (total < min_seconds and calls < 50):
    dt = rounds.seconds(lambda: jax.block_until_ready(fn()))
    best, total, calls = min(best, dt), total + dt, calls + 1
  return best


def matmul_flops_per_s(dtype: Any = jnp.float32, size: int = 1024) -> float:
  """FLOP/s of a jitted ``size`` x ``size`` matmul in ``dtype`` at full precision."""
  a = jnp.ones((size, size), dtype)
  b = jnp.full((size, size), 0.5, dtype)
  f = jax.jit(functools.partial(jnp.matmul, precision="highest"))
  return 2.0 * size**3 / best_seconds(lambda: f(a, b))


def copy_bandwidth(megabytes: int = 128) -> float:
  """Memory bandwidth in B/s: a jitted elementwise pass over ``megabytes`` of float32 (each
  element read once and written once, so 2 x ``megabytes`` moved)."""
  n = megabytes * 2**20 // 4
  x = jnp.ones((n,), jnp.float32)
  f = jax.jit(lambda v: v * 2.0)
  return 2.0 * 4 * n / best_seconds(lambda: f(x), repeats=3)


@functools.cache
def cpu_peaks() -> Peaks:
  """This CPU's peaks as measured now (once per process): float32 and bfloat16 matmul FLOP/s
  and the copy bandwidth; TF32 is None (a CPU has none)."""
  return Peaks(
    name="CPU (measured by a probe)",
    fp32=matmul_flops_per_s(jnp.float32),
    tf32=None,
    bf16=matmul_flops_per_s(jnp.bfloat16),
    bandwidth=copy_bandwidth(),
    source="probe: timed 1024x1024 matmul, timed 128 MiB copy",
  )
