"""Exact inverse-CDF thresholds of the Gaussian rounded to the 8-bit grid (host, no JAX).

The sound noise of ``rsjax.noise.Gaussian8bit`` (Voracek and Hein, "Sound
Randomized Smoothing in Floating-Point Arithmetic", ICLR 2023) is ``k / L`` with
``k = round(L * sigma * z)``, ``z ~ N(0, 1)``, ``L = 255``: the Gaussian rounded to
the grid of the image. In units of the grid, ``k`` is ``k`` with probability
``Phi((k + 1/2) / s) - Phi((k - 1/2) / s)``, ``s = L * sigma``.

It is drawn by inverse-CDF sampling of a uniform 64-bit integer ``u`` against the
integer thresholds ``t_i = floor(2**64 * Phi(b_i / s))`` of the cell boundaries
``b_i = i - K - 1/2`` (``i = 0 .. 2K + 1``): ``u`` draws ``k = idx - K - 1``, where
``idx`` is the number of thresholds ``<= u``. The draw is *valid* when the cell
``[u, u + 1)`` lies inside one exact interval ``[2**64 Phi(b_{idx-1} / s),
2**64 Phi(b_idx / s))``, i.e. when ``idx <= 2K + 1`` and ``u != t_{idx-1}``; an
invalid draw (out of the table's range, or a cell a boundary cuts) is counted
against every class. Coupling ``u = floor(2**64 U)`` with a real uniform ``U``, a
valid draw equals the exact rounded Gaussian's, so the probability that a sample
counts for class A is at most the exact smoothed probability of A: the
Clopper-Pearson bound stays a bound for the exact noise, with nothing to subtract.

``K`` is the smallest integer with ``2**64 * Phi(-(K + 1/2) / s) < 1``, so
``t_0 = 0`` and ``t_{2K+1} = 2**64 - 1``. The values ``2**64 Phi(b / s)`` are
computed with ``decimal`` at 80 significant digits (the error is below 1e-40 in
absolute value); a threshold whose value lies within 1e-30 of an integer is
refused rather than guessed. Tables are cached per sigma.
"""

from __future__ import annotations

import decimal
import functools
import hashlib
import math

import numpy as np

__all__ = ["LEVELS", "Table", "table", "table_hash", "pmf"]

#: The number of steps of the 8-bit grid: pixel values are ``m / LEVELS``, ``m = 0 .. 255``.
LEVELS = 255
_PREC = 80
_TWO64 = 2**64


def _pi(ctx: decimal.Context) -> decimal.Decimal:
  """Pi to the context's precision (the recipe of the ``decimal`` documentation)."""
  with decimal.localcontext(ctx) as c:
    c.prec += 2
    three = decimal.Decimal(3)
    lasts, t, s, n, na, d, da = decimal.Decimal(0), three, three, 1, 0, 0, 24
    while s != lasts:
      lasts = s
      n, na = n + na, na + 8
      d, da = d + da, da + 32
      t = (t * n) / d
      s += t
  return +s


def _upper_cdf(z: decimal.Decimal, ctx: decimal.Context) -> decimal.Decimal:
  """``Phi(z)`` for ``z >= 0``: ``(1 + erf(z / sqrt 2)) / 2`` with the positive series
  ``erf(x) = 2 / sqrt(pi) e^{-x^2} sum_n 2^n x^{2n+1} / (1 3 5 ... (2n+1))`` (no cancellation)."""
  with decimal.localcontext(ctx):
    x = z / decimal.Decimal(2).sqrt()
    x2 = x * x
    term, total, n = x, x, 0
    eps = decimal.Decimal(10) ** -(_PREC + 10)
    # Past n > x^2 the ratio 2 x^2 / (2n + 1) is below 1/2, so the tail is below 2 * term.
    while n <= x2 or term > eps * total:
      n += 1
      term = term * 2 * x2 / (2 * n + 1)
      total += term
    erf = 2 / _pi(ctx).sqrt() * (-x2).exp() * total
    return (1 + erf) / 2


def _scaled_cdf(b2: int, s: decimal.Decimal, ctx: decimal.Context) -> decimal.Decimal:
  """``2**64 * Phi((b2 / 2) / s)`` for the half-integer boundary ``b2 / 2``."""
  with decimal.localcontext(ctx):
    z = decimal.Decimal(abs(b2)) / 2 / s
    p = _upper_cdf(z, ctx)
    return _TWO64 * (p if b2 >= 0 else 1 - p)


def _floor_exact(c: decimal.Decimal, where: str) -> int:
  f = int(c.to_integral_value(rounding=decimal.ROUND_FLOOR))
  margin = decimal.Decimal(10) ** -30
  if c - f < margin or (f + 1) - c < margin:
    raise ArithmeticError(f"threshold {where} lies within 1e-30 of an integer; refusing to guess")
  return f


class Table:
  """The thresholds of one sigma (module docstring).

  Attributes:
    sigma: the noise level (its float64 value, exactly).
    k_max: ``K``: draws lie in ``-K .. K`` grid steps.
    thresholds: ``[2K + 2]`` Python ints ``t_i`` in ``[0, 2**64)``.
    pairs: ``[2K + 1, 4]`` uint32: row ``i - 1`` holds the high words of ``t_{i-1}, t_i``,
      then their low words (``i = 1 .. 2K + 1``): the two thresholds the device compares a
      draw with (``rsjax.noise.grid_draw``), fetched in one gather.
    bucket_bits: ``b``, the mantissa bits of a bucket (below).
    buckets: ``[2 * 65 * 2**b]`` int32: where to look a draw up. ``v = u`` for ``u < 2**63``
      (half 0), else ``v = 2**64 - 1 - u`` (half 1); a bucket is ``(half, lz, mant)`` with
      ``lz`` the leading zeros of ``v`` (64 bits) and ``mant`` the ``b`` bits below its
      leading one (zero-padded). The entry is ``i = idx(smallest u of the bucket)``
      (clipped to ``1 .. 2K + 1``); ``b`` is the smallest with at most one threshold
      inside any bucket, so every ``u`` of the bucket has ``idx`` ``i`` or ``i + 1``:
      ``t_{i-1}`` and ``t_i`` decide it.
    digest: :func:`table_hash` of the table.
  """

  def __init__(self, sigma: float, k_max: int, thresholds: list[int]):
    self.sigma, self.k_max, self.thresholds = float(sigma), int(k_max), thresholds
    arr = np.array(thresholds, dtype=np.uint64)
    hi = (arr >> np.uint64(32)).astype(np.uint32)
    lo = (arr & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    rows = np.arange(len(thresholds) - 1)[:, None] + np.arange(2)
    self.pairs = np.concatenate([hi[rows], lo[rows]], axis=1)
    self.bucket_bits, self.buckets = _buckets(arr)
    text = f"rsjax gaussian_8bit v1 levels={LEVELS} sigma={self.sigma!r} K={self.k_max}\n"
    text += "\n".join(str(t) for t in thresholds)
    self.digest = "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def bucket_range(lz: int, mant: int, b: int) -> tuple[int, int]:
  """``(first, last)`` value ``v`` of the bucket ``(lz, mant)`` (``last < first``: empty)."""
  if lz == 0:  # v < 2**63 always
    return 1, 0
  if lz == 64:
    return (0, 0) if mant == 0 else (1, 0)
  p = 63 - lz  # the leading one's bit
  if p >= b:
    first = (1 << p) + (mant << (p - b))
    return first, first + (1 << (p - b)) - 1
  if mant & ((1 << (b - p)) - 1):
    return 1, 0
  v = (1 << p) + (mant >> (b - p))
  return v, v


def _buckets(t: np.ndarray) -> tuple[int, np.ndarray]:
  """``(b, buckets)`` of the thresholds ``t`` ``[M]`` uint64 (:class:`Table`)."""
  m = len(t)
  for b in range(4, 20):
    firsts, lasts = [], []
    for half in (0, 1):
      for lz in range(65):
        for mant in range(1 << b):
          a, z = bucket_range(lz, mant, b)
          if z < a:
            a = z = 0
          lo, hi = (a, z) if half == 0 else (_TWO64 - 1 - z, _TWO64 - 1 - a)
          firsts.append(lo)
          lasts.append(hi)
    i_first = np.searchsorted(t, np.array(firsts, np.uint64), side="right")
    i_last = np.searchsorted(t, np.array(lasts, np.uint64), side="right")
    if np.all(i_last - i_first <= 1):
      return b, np.clip(i_first, 1, m - 1).astype(np.int32)
  raise ArithmeticError("no bucket size keeps one threshold per bucket")


def table(sigma: float) -> Table:
  """The exact threshold table of ``sigma`` (cached; about a second for sigma <= 1).

  The engine holds sigma in float32, so the table is that of ``float32(sigma)`` (exactly):
  ``table(0.12)`` is the table the engine draws from at ``sigma=0.12``.
  """
  return _table(float(np.float32(sigma)))


@functools.lru_cache(maxsize=16)
def _table(sigma: float) -> Table:
  if not (math.isfinite(sigma) and 0 < sigma <= 4):
    raise ValueError(f"sigma: the 8-bit sound noise needs 0 < sigma <= 4, got {sigma}")
  ctx = decimal.Context(prec=_PREC)
  with decimal.localcontext(ctx):  # every operation at _PREC digits
    s = LEVELS * decimal.Decimal(sigma)  # the float's exact value
    # K from the float tail estimate, then corrected with the exact values.
    k = max(1, int(9.0 * float(s)))
    while _scaled_cdf(-(2 * k + 1), s, ctx) >= 1:
      k += 1
    while k > 1 and _scaled_cdf(-(2 * k - 1), s, ctx) < 1:
      k -= 1
    # Boundaries b_i = i - K - 1/2, i = 0 .. 2K + 1; Phi(-z) = 1 - Phi(z) gives both halves.
    upper = [_scaled_cdf(2 * j + 1, s, ctx) for j in range(k + 1)]  # b = j + 1/2
    thresholds = [_floor_exact(_TWO64 - c, f"-{j}.5") for j, c in reversed(list(enumerate(upper)))]
    thresholds += [_floor_exact(c, f"{j}.5") for j, c in enumerate(upper)]
    assert thresholds[0] == 0 and thresholds[-1] == _TWO64 - 1, "K does not cover the range"
    assert all(a <= b for a, b in zip(thresholds, thresholds[1:], strict=False))
    return Table(sigma, k, thresholds)


def table_hash(sigma: float) -> str:
  """``"sha256:<hex>"`` of the threshold table of ``sigma`` (the run record names it)."""
  return table(sigma).digest


def pmf(sigma: float) -> tuple[np.ndarray, np.ndarray]:
  """``(k [2K + 1], P(valid draw = k) [2K + 1])``: the sampler's exact probabilities
  (float64 from the integer thresholds; the exact rounded Gaussian's to within 2**-64)."""
  t = table(sigma)
  th = [int(v) for v in t.thresholds]
  widths = [max(0, b - a - 1) for a, b in zip(th, th[1:], strict=False)]  # u in (t_i, t_{i+1})
  probs = np.array([w / _TWO64 for w in widths], np.float64)
  return np.arange(-t.k_max, t.k_max + 1), probs
