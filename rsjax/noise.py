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

Use ``family.scale_from_std(std)`` to convert a nominal standard deviation to
``sigma`` (e.g. to compare families at equal variance).

``sigma`` may be a float, one value per input (``[B]``) or one value per input
dimension (``[B, *input_shape]``, anisotropic noise). The radius functions take
a *scalar per input*; for anisotropic scales see ``rsjax.anisotropic``.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.extend.random as jex_random
import jax.numpy as jnp
import numpy as np

from rsjax import stats

__all__ = ["standard_normal", "Noise", "Gaussian", "Laplace", "Uniform", "GAUSSIAN", "get_noise"]


@dataclasses.dataclass(frozen=True)
class Noise:
  """Base class of noise families (static, hashable)."""

  name: str = "noise"
  norm: str = "l2"

  def sample(self, key: jax.Array, shape: tuple[int, ...], dtype=jnp.float32) -> jax.Array:
    """Unit-scale noise of ``shape`` (multiply by ``sigma``)."""
    raise NotImplementedError

  def radius(self, p_lower, sigma, dim: int) -> np.ndarray:
    """Binary certified radius in ``self.norm`` (host, float64)."""
    raise NotImplementedError

  def scale_from_std(self, std):
    """The ``sigma`` of this family whose noise has standard deviation ``std``."""
    raise NotImplementedError


def _threefry_bits(key: jax.Array, n: int) -> jax.Array:
  """``n`` random 32-bit words from one threefry key, two words per hash.

  ``jax.random.bits`` (partitionable threefry) hashes once per 32-bit output;
  hashing counter pairs and keeping both output words halves the hashing, which
  dominates noise generation on CPUs. The words depend only on the key.
  """
  return jex_random.threefry_2x32(jax.random.key_data(key), jnp.arange(n, dtype=jnp.uint32))


def standard_normal(key: jax.Array, shape: tuple[int, ...], dtype=jnp.float32) -> jax.Array:
  """Standard normal samples, as ``jax.random.normal`` (23-bit uniform on (-1, 1),
  then ``sqrt(2) * erfinv``) but from :func:`_threefry_bits`."""
  n = math.prod(shape)
  bits = _threefry_bits(key, n)
  f = jax.lax.bitcast_convert_type((bits >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0
  lo = jnp.nextafter(jnp.float32(-1.0), jnp.float32(1.0))
  u = jnp.maximum(lo, f * (1.0 - lo) + lo)  # (-1, 1): erfinv stays finite
  z = jnp.float32(math.sqrt(2.0)) * jax.lax.erf_inv(u)
  return z.reshape(shape).astype(dtype)


@dataclasses.dataclass(frozen=True)
class Gaussian(Noise):
  """Isotropic Gaussian noise N(0, sigma^2 I); certifies the L2 norm (Cohen et al.)."""

  name: str = "gaussian"
  norm: str = "l2"

  def sample(self, key, shape, dtype=jnp.float32):
    return standard_normal(key, shape, dtype)

  def radius(self, p_lower, sigma, dim):
    return stats.gaussian_radius(p_lower, sigma)

  def scale_from_std(self, std):
    return std


@dataclasses.dataclass(frozen=True)
class Laplace(Noise):
  """Laplace noise with scale ``sigma`` per coordinate; certifies L1 (Teng et al.)."""

  name: str = "laplace"
  norm: str = "l1"

  def sample(self, key, shape, dtype=jnp.float32):
    return jax.random.laplace(key, shape, dtype)

  def radius(self, p_lower, sigma, dim):
    return stats.laplace_l1_radius(p_lower, sigma)

  def scale_from_std(self, std):
    return std / math.sqrt(2.0)


@dataclasses.dataclass(frozen=True)
class Uniform(Noise):
  """Uniform noise on ``[-sigma, sigma]^d``; certifies L1 (default) or Linf."""

  name: str = "uniform"
  norm: str = "l1"

  def __post_init__(self):
    if self.norm not in ("l1", "linf"):
      raise ValueError(f"Uniform noise certifies norm 'l1' or 'linf', got {self.norm!r}")

  def sample(self, key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, minval=-1.0, maxval=1.0)

  def radius(self, p_lower, sigma, dim):
    if self.norm == "l1":
      return stats.uniform_l1_radius(p_lower, sigma)
    return stats.uniform_linf_radius(p_lower, sigma, dim)

  def scale_from_std(self, std):
    return std * math.sqrt(3.0)


GAUSSIAN = Gaussian()

_BY_NAME = {
    "gaussian": Gaussian(),
    "laplace": Laplace(),
    "uniform": Uniform(),
    "uniform_l1": Uniform(norm="l1"),
    "uniform_linf": Uniform(norm="linf"),
}


def get_noise(noise: "Noise | str | None") -> Noise:
  """Resolves a noise family from an instance or a name (``gaussian``, ``laplace``,
  ``uniform``/``uniform_l1``, ``uniform_linf``)."""
  if noise is None:
    return GAUSSIAN
  if isinstance(noise, Noise):
    return noise
  try:
    return _BY_NAME[str(noise).lower()]
  except KeyError:
    raise ValueError(f"noise: unknown family {noise!r}; choose from {sorted(_BY_NAME)}") from None
