"""Draws of the Gaussian rounded to the 8-bit grid, on device (``rsjax.noise.Gaussian8bit``).

The draw of a uniform 64-bit integer ``u`` is defined by the exact thresholds of
``rsjax.noise.lattice``: ``k = idx - K - 1`` with ``idx`` the number of thresholds ``<= u``,
valid when ``idx <= 2K + 1`` and ``u != t_{idx-1}``. On device ``u`` is a pair of
uint32 words ``(hi, lo)`` (JAX without x64 has no uint64), and ``idx`` is found in
two exact steps:

1. a bucket of ``u`` from integer bits alone: ``v = u`` (or ``2**64 - 1 - u`` above 2**63),
   its leading zeros and the next ``b`` bits; a host table (``Table.buckets``) gives
   ``i``, the ``idx`` of the bucket's smallest ``u`` (at most one threshold falls inside a
   bucket: ``b`` is chosen so);
2. ``t_i`` (one gather of ``Table.pairs``, with ``t_{i-1}``), compared with ``u``
   lexicographically on (hi, lo): ``idx`` is ``i + [t_i <= u]``.

No floating point is involved: every draw is the exact draw of its ``u``. Invalid draws
(``u`` in a cell a threshold cuts, or ``u = 2**64 - 1``; probability about ``2K 2**-64``)
are marked ``GRID_INVALID`` and count against every class.
"""

from __future__ import annotations

import jax
import jax.extend.random as jex_random
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from rsjax.noise import lattice

__all__ = ["GRID_INVALID", "check_grid", "grid_lookup", "grid_offsets"]

#: The grid offset of a draw counted against every class.
GRID_INVALID = 1 << 30


def grid_offsets(tab: lattice.Table, key: jax.Array, n: int) -> jax.Array:
  """``[n]`` int32 draws (grid steps) from one typed key; ``GRID_INVALID`` where not valid.

  Draw ``i`` takes the two output words of one Threefry-2x32 hash (counters ``i`` and
  ``i + n``, ``jax.extend.random.threefry_2x32``): ``u = hi * 2**32 + lo``.
  """
  bits = jex_random.threefry_2x32(jax.random.key_data(key), jnp.arange(2 * n, dtype=jnp.uint32))
  return grid_lookup(tab, bits[:n], bits[n:])


def _le(h: jax.Array, lo: jax.Array, uh: jax.Array, ul: jax.Array) -> jax.Array:
  """``(h, lo) <= (uh, ul)`` as 64-bit integers."""
  return (h < uh) | ((h == uh) & (lo <= ul))


def grid_lookup(tab: lattice.Table, uh: jax.Array, ul: jax.Array) -> jax.Array:
  """Grid offsets ``[n]`` int32 of the 64-bit uniforms ``uh * 2**32 + ul`` (``[n]`` uint32
  each): the exact draw (module docstring), ``GRID_INVALID`` where it is not valid."""
  b = tab.bucket_bits
  flip = uh >= jnp.uint32(1 << 31)  # u >= 2**63: look up v = 2**64 - 1 - u
  vh, vl = jnp.where(flip, ~uh, uh), jnp.where(flip, ~ul, ul)
  lz = jnp.where(vh != 0, jax.lax.clz(vh), 32 + jax.lax.clz(vl))  # leading zeros of v
  s = lz + 1  # shift the leading one out: the top 32 bits of (v << s) mod 2**64
  top = jnp.where(
    s < 32,
    (vh << s) | (vl >> (32 - s)),
    jnp.where(s < 64, vl << (s - 32), jnp.uint32(0)),
  )
  bucket = ((flip.astype(jnp.uint32) * 65 + lz) << b) | (top >> (32 - b))
  i = jnp.asarray(tab.buckets).at[bucket.astype(jnp.int32)].get(mode="promise_in_bounds")
  # One gather of t_{i-1} and t_i (hi words, then lo words); idx is i or i + 1.
  w = jnp.asarray(tab.pairs).at[i - 1].get(mode="promise_in_bounds")  # [n, 4]
  idx = i + _le(w[:, 1], w[:, 3], uh, ul).astype(jnp.int32)  # t_i <= u
  # u = t_{idx-1} (a cell a threshold cuts) exactly when u is t_{i-1} or t_i.
  cut = (((uh ^ w[:, 0]) | (ul ^ w[:, 2])) == 0) | (((uh ^ w[:, 1]) | (ul ^ w[:, 3])) == 0)
  ok = (idx < len(tab.thresholds)) & ~cut
  return jnp.where(ok, idx - (tab.k_max + 1), jnp.int32(GRID_INVALID))


def check_grid(x: ArrayLike, what: str = "gaussian_8bit") -> None:
  """Refuses inputs not on the 8-bit grid ``{0, 1/255, ..., 1}`` (to 1e-4 grid steps)."""
  v = np.asarray(x, np.float64) * lattice.LEVELS
  r = np.round(v)
  off = (np.abs(v - r) > 1e-4) | (r < 0) | (r > lattice.LEVELS)
  if np.any(off):
    bad = float(np.asarray(x, np.float64).reshape(-1)[np.argmax(off.reshape(-1))])
    raise ValueError(
      f"noise {what}: the inputs must be 8-bit images, values m/255 in [0, 1] "
      f"(e.g. {bad!r} is not); use --noise gaussian for other inputs"
    )
