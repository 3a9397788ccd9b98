"""Noise distributions for randomized smoothing and their certificates.

A noise family is a small frozen dataclass: hashable, so it can be a static
argument of ``jax.jit``. It knows how to draw *unit-scale* noise on device and
how to turn a lower bound on the top-class probability into a radius on the
host.

Scale convention. Everywhere in rsjax the ``sigma`` argument is the family's
natural scale parameter ``lambda``; the noise added to ``x`` is ``sigma * eps``
with ``eps`` drawn from the unit family:

==========  ===========================  ===============  ==========  ================================
family      unit sample ``eps``           ``sigma`` means   std         radius (binary, p = p_lower)
==========  ===========================  ===============  ==========  ================================
Gaussian    N(0, 1)                       std               sigma       L2:  sigma * Phi^-1(p)
Laplace     Laplace(0, 1), density e^-|t|/2  scale b      sqrt(2) sigma  L1: -sigma * log(2 (1 - p))
Uniform     U[-1, 1]                      half-width        sigma/sqrt3  L1: 2 sigma (p - 1/2);
                                                                        Linf: 2 sigma (1-(3/2-p)^(1/d))
==========  ===========================  ===============  ==========  ================================

``gaussian_8bit`` (:class:`Gaussian8bit`) is the Gaussian rounded to the 8-bit grid, drawn
as exact integers and added to the image as integers (sound in floating point, Voracek and
Hein 2023); its ``sigma`` is the Gaussian's std and its radius the Gaussian L2 radius, for
8-bit images near ``x``.

Use ``family.scale_from_std(std)`` to convert a nominal standard deviation to
``sigma`` (e.g. to compare families at equal variance).

``sigma`` may be a float, one value per input (``[B]``) or one value per input
dimension (``[B, *input_shape]``, anisotropic noise). The radius functions take
a *scalar per input*; for anisotropic scales see ``rsjax.ucan``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import ClassVar

import jax
import jax.extend.random as jex_random
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from rsjax import claims, stats
from rsjax.noise import grid_draw, lattice

__all__ = [
  "standard_normal",
  "Noise",
  "Gaussian",
  "Laplace",
  "Uniform",
  "Gaussian8bit",
  "GAUSSIAN",
  "NOISES",
  "get_noise",
]

#: The shape of a draw of noise (``Noise.sample``).
Shape = tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Noise:
  """Base class of noise families (static, hashable)."""

  name: str = "noise"
  norm: str = "l2"

  #: Whether the family draws grid offsets added to the image as integers (``noisy``).
  lattice: ClassVar[bool] = False
  #: What the radius certifies, when more precise than "every x' within it" (guarantee texts).
  certifies: ClassVar[str] = ""
  #: Relative margin by which the engine rounds the Clopper-Pearson bound down (0: as computed).
  p_lower_margin: ClassVar[float] = 0.0

  def round_p_lower(self, p_lower: ArrayLike) -> np.ndarray:
    """A Clopper-Pearson bound as the engine reports it: rounded down by
    :attr:`p_lower_margin` (``rsjax.claims.round_down``), unchanged when it is 0."""
    if self.p_lower_margin == 0:
      return np.asarray(p_lower, np.float64)
    return claims.round_down(p_lower, self.p_lower_margin)

  def sample(self, key: jax.Array, shape: Shape, dtype: DTypeLike = jnp.float32) -> jax.Array:
    """Unit-scale noise of ``shape`` (multiply by ``sigma``)."""
    raise NotImplementedError

  def radius(self, p_lower: ArrayLike, sigma: ArrayLike, dim: int) -> np.ndarray:
    """Binary certified radius in ``self.norm`` (host, float64)."""
    raise NotImplementedError

  def scale_from_std(self, std: float) -> float:
    """The ``sigma`` of this family whose noise has standard deviation ``std``."""
    raise NotImplementedError

  def bind(self, x: np.ndarray, sigma: np.ndarray) -> Noise:
    """The family to draw with for inputs ``x`` at scales ``sigma`` (host; here itself).
    A family whose draws depend on sigma (:class:`Gaussian8bit`) checks and binds it."""
    return self

  def bind_sigma(self, sigma: ArrayLike) -> Noise:
    """The family to draw with at the float32 scales ``sigma``, inputs aside (here itself;
    ``sigma`` is not read, so it may be traced). :class:`Gaussian8bit` checks and binds it."""
    return self


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry2x32(k0, k1, x0, x1, rounds: int = 20):
  """The Threefry-2x32 block cipher (Salmon et al., SC'11, "Parallel random
  numbers: as easy as 1, 2, 3") with ``rounds`` rounds, written out in jnp.

  With 20 rounds (Random123's and JAX's default) the output equals
  ``jax.extend.random.threefry_2x32``, which JAX lowers on CPU to a rolled loop
  of 5 iterations whose intermediates go through memory; written out, XLA fuses
  the whole hash into one loop (about 1.5x cheaper on CPU). The default stream
  still calls JAX's primitive: the same noise computed by a different program
  can round the noisy input ``x + sigma * eps`` differently in the last bit
  (FMA contraction in another fusion), and the default must stay bit-identical.
  """
  ks = (k0, k1, k0 ^ k1 ^ jnp.uint32(0x1BD11BDA))
  x0, x1 = x0 + ks[0], x1 + ks[1]
  for r in range(rounds):
    x0 = x0 + x1
    d = _ROTATIONS[(r // 4) % 2][r % 4]
    x1 = x0 ^ ((x1 << jnp.uint32(d)) | (x1 >> jnp.uint32(32 - d)))
    if r % 4 == 3:  # key injection after every 4 rounds
      i = r // 4 + 1
      x0, x1 = x0 + ks[i % 3], x1 + ks[(i + 1) % 3] + jnp.uint32(i)
  return x0, x1


def _threefry_word_halves(key: jax.Array, n: int, rounds: int = 20):
  """The two output words of the ``ceil(n / 2)`` hashes that make ``n`` random words.

  Word ``t`` of the stream is the first output of hash ``t`` for ``t < h`` and the
  second output of hash ``t - h`` otherwise (``h = ceil(n / 2)``), the counter
  layout of ``jax.extend.random.threefry_2x32``: hash ``t`` encrypts the counter
  pair ``(t, t + h)`` (``0`` past the end).
  """
  kd = jax.random.key_data(key)
  h = -(-n // 2)
  c = jnp.arange(h, dtype=jnp.uint32)
  c2 = c + jnp.uint32(h)
  if n % 2:
    c2 = jnp.where(c2 < n, c2, jnp.uint32(0))
  return _threefry2x32(kd[0], kd[1], c, c2, rounds)


def _uniform_open(bits: jax.Array) -> jax.Array:
  """23-bit uniform on the open interval (-1, 1), as ``jax.random.normal`` makes it."""
  f = jax.lax.bitcast_convert_type((bits >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0
  lo = jnp.nextafter(jnp.float32(-1.0), jnp.float32(1.0))
  return jnp.maximum(lo, f * (1.0 - lo) + lo)  # (-1, 1): erfinv stays finite


# Giles (2010), "Approximating the erfinv function", single-precision branch
# coefficients (central region w < 5, then the tail in sqrt(w)).
_ERFINV_CENTRAL = (
  2.81022636e-08,
  3.43273939e-07,
  -3.5233877e-06,
  -4.39150654e-06,
  0.00021858087,
  -0.00125372503,
  -0.00417768164,
  0.246640727,
  1.50140941,
)
_ERFINV_TAIL = (
  -0.000200214257,
  0.000100950558,
  0.00134934322,
  -0.00367342844,
  0.00573950773,
  -0.0076224613,
  0.00943887047,
  1.00167406,
  2.83297682,
)


def _erfinv_giles(u: jax.Array) -> jax.Array:
  """float32 ``erfinv`` on (-1, 1) by Giles' polynomials (the algorithm XLA's
  ``erf_inv`` uses; written out it fuses with the hash and skips XLA's edge cases,
  which (-1, 1) never reaches). Agrees with ``lax.erf_inv`` to a few float32 ulps."""
  w = -jnp.log((1.0 - u) * (1.0 + u))
  w1, w2 = w - 2.5, jnp.sqrt(w) - 3.0
  p1, p2 = jnp.float32(_ERFINV_CENTRAL[0]), jnp.float32(_ERFINV_TAIL[0])
  for a, b in zip(_ERFINV_CENTRAL[1:], _ERFINV_TAIL[1:], strict=True):
    p1, p2 = jnp.float32(a) + p1 * w1, jnp.float32(b) + p2 * w2
  return jnp.where(w < 5.0, p1, p2) * u


# Gaussian noise streams: name -> (threefry rounds, uniform -> normal transform).
_STREAMS = {
  "threefry20": (20, jax.lax.erf_inv),
  "threefry13": (13, _erfinv_giles),
}


def _stream(stream: str) -> tuple[int, Callable[[jax.Array], jax.Array]]:
  """``(rounds, erfinv)`` of a Gaussian stream; ``ValueError`` for an unknown one."""
  if stream not in _STREAMS:
    raise ValueError(f"stream: unknown Gaussian stream {stream!r}; choose from {sorted(_STREAMS)}")
  return _STREAMS[stream]


def standard_normal(
  key: jax.Array, shape: Shape, dtype: DTypeLike = jnp.float32, stream: str = "threefry20"
) -> jax.Array:
  """Standard normal samples from one key: ``[*shape]``.

  Each Threefry-2x32 hash gives two 32-bit words, each word one normal (23-bit
  uniform on (-1, 1), then ``sqrt(2) * erfinv``, the transform of
  ``jax.random.normal``). The values depend only on ``key``, ``shape`` and
  ``stream``.

  Args:
    key: a threefry typed key.
    shape: output shape.
    dtype: output dtype (the normals are made in float32).
    stream: ``"threefry20"`` (default): Threefry-2x32 with 20 rounds and XLA's
      ``erf_inv``, the stream rsjax has always drawn. ``"threefry13"``: 13 rounds,
      the fewest that Salmon et al. (SC'11, Random123) found to pass TestU01's
      BigCrush for Threefry-2x32 (20 is their default, kept as a safety margin),
      and Giles' ``erfinv`` written out; cheaper on CPUs, weaker margin, a
      different stream (same distribution).
  """
  rounds, erfinv = _stream(stream)
  n = math.prod(shape)

  def to_normal(w):
    return jnp.float32(math.sqrt(2.0)) * erfinv(_uniform_open(w))

  if stream == "threefry20":  # JAX's primitive: the program rsjax always ran
    bits = jex_random.threefry_2x32(jax.random.key_data(key), jnp.arange(n, dtype=jnp.uint32))
    return to_normal(bits).reshape(shape).astype(dtype)
  a, b = _threefry_word_halves(key, n, rounds)
  # The barrier keeps each hash computed once: without it XLA fuses the hash into
  # the concatenation and evaluates it once per output word, i.e. twice.
  za, zb = jax.lax.optimization_barrier((to_normal(a), to_normal(b)))
  z = jnp.concatenate([za, zb])[:n]
  return z.reshape(shape).astype(dtype)


@dataclasses.dataclass(frozen=True)
class Gaussian(Noise):
  """Isotropic Gaussian noise N(0, sigma^2 I); certifies the L2 norm (Cohen et al.).

  ``stream`` picks the random stream (see :func:`standard_normal`):
  ``"threefry20"`` (default) or the cheaper ``"threefry13"`` (name
  ``"gaussian_fast"``). Both are N(0, 1) and equally reproducible; they give
  different noise, hence different counts, for the same key.
  """

  name: str = "gaussian"
  norm: str = "l2"
  stream: str = "threefry20"

  def __post_init__(self) -> None:
    _stream(self.stream)

  def sample(self, key: jax.Array, shape: Shape, dtype: DTypeLike = jnp.float32) -> jax.Array:
    return standard_normal(key, shape, dtype, self.stream)

  def radius(self, p_lower: ArrayLike, sigma: ArrayLike, dim: int) -> np.ndarray:
    return stats.gaussian_radius(p_lower, sigma)

  def scale_from_std(self, std: float) -> float:
    return std


@dataclasses.dataclass(frozen=True)
class Laplace(Noise):
  """Laplace noise with scale ``sigma`` per coordinate; certifies L1 (Teng et al.)."""

  name: str = "laplace"
  norm: str = "l1"

  def sample(self, key: jax.Array, shape: Shape, dtype: DTypeLike = jnp.float32) -> jax.Array:
    return jax.random.laplace(key, shape, dtype)

  def radius(self, p_lower: ArrayLike, sigma: ArrayLike, dim: int) -> np.ndarray:
    return stats.laplace_l1_radius(p_lower, sigma)

  def scale_from_std(self, std: float) -> float:
    return std / math.sqrt(2.0)


@dataclasses.dataclass(frozen=True)
class Uniform(Noise):
  """Uniform noise on ``[-sigma, sigma]^d``; certifies L1 (default) or Linf."""

  name: str = "uniform"
  norm: str = "l1"

  def __post_init__(self) -> None:
    if self.norm not in ("l1", "linf"):
      raise ValueError(f"Uniform noise certifies norm 'l1' or 'linf', got {self.norm!r}")

  def sample(self, key: jax.Array, shape: Shape, dtype: DTypeLike = jnp.float32) -> jax.Array:
    return jax.random.uniform(key, shape, dtype, minval=-1.0, maxval=1.0)

  def radius(self, p_lower: ArrayLike, sigma: ArrayLike, dim: int) -> np.ndarray:
    if self.norm == "l1":
      return stats.uniform_l1_radius(p_lower, sigma)
    return stats.uniform_linf_radius(p_lower, sigma, dim)

  def scale_from_std(self, std: float) -> float:
    return std * math.sqrt(3.0)


@dataclasses.dataclass(frozen=True)
class Gaussian8bit(Noise):
  """Sound Gaussian noise for 8-bit inputs (Voracek and Hein, ICLR 2023); certifies L2.

  The noise is the Gaussian N(0, sigma^2) rounded to the grid ``1/255`` (exact
  thresholds: ``rsjax.noise.lattice``), drawn as integers; the image ``x`` (on the grid)
  is kept as integers ``m = 255 x`` through the add and cast once, so the network
  sees ``float32(m + k) / 255``: a function of the lattice point alone, whatever
  low-order bits a float ``x + sigma * eps`` would have left. Smoothing with it at
  ``x`` is smoothing ``f(round(.))`` with the real Gaussian, so Cohen et al.'s
  radius ``sigma * Phi^-1(p_lower)`` holds for every 8-bit image within it.

  A draw outside the table or in a cell a threshold cuts (probability below
  ``2K 2**-64`` per pixel) counts against every class: the counts of its input then
  sum to less than ``n``. The family is bound to one scalar sigma per run
  (:meth:`bind`); inputs off the grid are refused.
  """

  name: str = "gaussian_8bit"
  norm: str = "l2"
  sigma: float | None = None

  lattice: ClassVar[bool] = True
  # The certificate is rounded down, below its exact value (rsjax.claims.P_LOWER_MARGIN).
  p_lower_margin: ClassVar[float] = claims.P_LOWER_MARGIN
  certifies: ClassVar[str] = (
    "; sound in floating point (Voracek and Hein 2023): certifies every 8-bit image x' "
    "(values m/255) with ||x' - x||_2 < R, for the network as it runs on float32(m/255); "
    "draws outside the exact threshold table, or in a cell a threshold cuts, count against "
    "every class"
  )

  def bind(self, x: np.ndarray, sigma: np.ndarray) -> Gaussian8bit:
    bound = self.bind_sigma(sigma)
    grid_draw.check_grid(x, self.name)
    return bound

  def bind_sigma(self, sigma: ArrayLike) -> Gaussian8bit:
    # The draws read the bound sigma, never the caller's: it must be one concrete value, and
    # the bound one when the family is bound already.
    try:
      sig = np.unique(np.asarray(sigma, np.float32)).astype(np.float64)  # the engine's float32
    except jax.errors.TracerArrayConversionError:
      raise ValueError(
        f"noise {self.name}: sigma must be a concrete value, not traced (the draws are bound "
        "to one sigma on the host)"
      ) from None
    if sig.size != 1:
      raise ValueError(
        f"noise {self.name}: one sigma for every input and pixel, got {sig.size} values"
      )
    if self.sigma is not None and float(sig[0]) != float(np.float32(self.sigma)):
      raise ValueError(f"noise {self.name}: bound to sigma {self.sigma}, called with {sig[0]}")
    return dataclasses.replace(self, sigma=float(sig[0]))

  def table(self) -> lattice.Table:
    if self.sigma is None:
      raise ValueError(f"noise {self.name}: bind it to a sigma first (Gaussian8bit(sigma=...))")
    return lattice.table(self.sigma)

  def sample(self, key: jax.Array, shape: Shape, dtype: DTypeLike = jnp.int32) -> jax.Array:
    """int32 grid offsets of ``shape`` (``grid_draw.GRID_INVALID`` where not valid)."""
    return grid_draw.grid_offsets(self.table(), key, math.prod(shape)).reshape(shape)

  def noisy(self, x: jax.Array, eps: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(float32 (255 x + eps) / 255, valid)``: ``x`` ``[g, 1, *shape]`` on the grid, ``eps``
    ``[g, s, *shape]`` int32 offsets -> ``[g, s, *shape]`` and ``valid`` ``[g, s]``."""
    m = jnp.round(x * lattice.LEVELS).astype(jnp.int32) + eps
    xn = m.astype(jnp.float32) / jnp.float32(lattice.LEVELS)
    # An invalid draw is NaN in the batch, and the mask is read from the batch: one consumer
    # of the lookup, which XLA would otherwise evaluate once for each.
    xn = jnp.where(eps == grid_draw.GRID_INVALID, jnp.float32(jnp.nan), xn)
    ok = ~jnp.any(jnp.isnan(xn).reshape(eps.shape[:2] + (-1,)), axis=-1)
    return xn, ok

  def radius(self, p_lower: ArrayLike, sigma: ArrayLike, dim: int) -> np.ndarray:
    """``sigma Phi^-1(p_lower)`` rounded down, below its exact value (``RADIUS_MARGIN``)."""
    return claims.round_down(stats.gaussian_radius(p_lower, sigma), claims.RADIUS_MARGIN)

  def scale_from_std(self, std: float) -> float:
    return std


#: The Gaussian noise family (the default ``noise=``), one shared value.
GAUSSIAN = Gaussian()

# The registry of noise families by name (the ``--noise`` choices of the command).
NOISES = {
  "gaussian": Gaussian(),
  "gaussian_fast": Gaussian(stream="threefry13"),
  "laplace": Laplace(),
  "uniform": Uniform(),
  "uniform_l1": Uniform(norm="l1"),
  "uniform_linf": Uniform(norm="linf"),
  "gaussian_8bit": Gaussian8bit(),
}


def get_noise(noise: Noise | str | None) -> Noise:
  """Resolves a noise family from an instance or a name (``gaussian``,
  ``gaussian_fast``, ``laplace``, ``uniform``/``uniform_l1``, ``uniform_linf``,
  ``gaussian_8bit``)."""
  if noise is None:
    return GAUSSIAN
  if isinstance(noise, Noise):
    return noise
  try:
    return NOISES[str(noise).lower()]
  except KeyError:
    raise ValueError(f"noise: unknown family {noise!r}; choose from {sorted(NOISES)}") from None
