"""Helpers shared by every rsjax module: argument checks, keys and local devices.

* Argument checks raise ``ValueError`` with a one-line message that names the
  argument: :func:`check_int`, :func:`check_integral`, :func:`check_alpha`,
  :func:`check_finite_positive`.
* Keys: :func:`as_key` accepts a typed key, a legacy ``uint32[2]`` key or an
  int seed.
* Devices: :func:`num_local_devices`, :func:`local_mesh` (a one-axis ``"dev"``
  mesh of local devices), :func:`replicate` and :func:`run_on_devices`, the
  sharded run of the counts engine and of SRS chains: every device gets the
  same (replicated) arguments and returns partial results stacked along a
  leading device axis, which the host combines (no collective, so CPU devices
  outnumbering cores cannot deadlock).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from jax.typing import ArrayLike

from rsjax.stats import check_alpha, check_integral

__all__ = [
  "COMPILE_EVENTS",
  "compile_clock",
  "KeyLike",
  "PyTree",
  "as_key",
  "check_alpha",
  "check_finite_positive",
  "check_int",
  "check_integral",
  "local_mesh",
  "num_local_devices",
  "replicate",
  "scale_per_input",
]

#: A ``key`` argument (:func:`as_key`): a typed key, a legacy ``uint32[2]`` key or an int seed.
KeyLike: TypeAlias = jax.Array | np.ndarray | int | np.integer
#: Any JAX pytree (parameters of ``apply_fn``); JAX has no narrower static type for one.
PyTree: TypeAlias = Any


# ----------------------------------------------------------------------------- checks


def check_int(name: str, value: object, minimum: int = 1) -> int:
  """``value`` as an int, or ``ValueError`` unless it is an integer ``>= minimum`` (not a bool)."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < minimum:
    raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
  return int(value)


def check_finite_positive(name: str, value: ArrayLike) -> np.ndarray:
  """``value`` as a NumPy array, or ``ValueError`` unless it is finite and > 0 everywhere."""
  arr = np.asarray(value)
  if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
    raise ValueError(f"{name} must be finite and > 0 everywhere")
  return arr


def scale_per_input(sig: np.ndarray) -> tuple[np.ndarray, bool]:
  """Scalar scale per input for a radius: the minimum over dimensions.

  For anisotropic noise ``sigma_i * eps`` the region ``||delta / sigma||_p <= R``
  contains the ball of radius ``min_i sigma_i * R`` (UCAN Corollary 3.3).

  Args:
    sig: ``[B, ...]`` noise scales.

  Returns:
    ``([B] float64 minimum, whether any input has unequal scales)``.
  """
  flat = sig.reshape(sig.shape[0], -1).astype(np.float64)
  return flat.min(axis=1), bool(flat.shape[1] > 1 and np.any(flat.max(1) != flat.min(1)))


# ----------------------------------------------------------------------------- keys


def as_key(key: KeyLike) -> jax.Array:
  """Returns a typed PRNG key from a typed key, a legacy uint32 key, or an int seed."""
  if isinstance(key, (int, np.integer)):
    return jax.random.key(int(key))
  if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    if key.shape != ():
      raise ValueError(f"key: expected a single key, got shape {key.shape}")
    return key
  arr = np.asarray(key) if not isinstance(key, jax.Array) else key
  if arr.dtype == np.uint32 and arr.shape == (2,):
    return jax.random.wrap_key_data(jnp.asarray(arr))
  raise ValueError(f"key: expected a jax.random.key, a legacy PRNGKey or an int, got {key!r}")


# ----------------------------------------------------------------------------- devices


def num_local_devices(devices: int | None) -> int:
  """The number of local devices to use: all (None) or ``devices``, at most those present."""
  ndev = len(jax.local_devices()) if devices is None else check_int("devices", devices)
  return min(ndev, len(jax.local_devices()))


@functools.lru_cache(maxsize=8)
def local_mesh(num_devices: int) -> jax.sharding.Mesh:
  """A one-axis mesh ``("dev",)`` over the first ``num_devices`` local devices."""
  devs = np.array(jax.local_devices()[:num_devices])
  return jax.sharding.Mesh(devs, ("dev",))


def replicate(mesh: jax.sharding.Mesh, tree: PyTree) -> PyTree:
  """``tree`` placed replicated over ``mesh`` (a no-op for arrays already placed so)."""
  return jax.device_put(tree, jax.sharding.NamedSharding(mesh, P()))


#: JAX's compile-phase events (seconds each), summed by :func:`compile_clock`.
COMPILE_EVENTS = (
  "/jax/core/compile/jaxpr_trace_duration",
  "/jax/core/compile/jaxpr_to_mlir_module_duration",
  "/jax/core/compile/backend_compile_duration",
)


@contextlib.contextmanager
def compile_clock() -> Iterator[list[float]]:
  """Sums JAX's compile-phase durations inside the block into ``clock[0]`` (seconds).

  Example::

    with compile_clock() as clock:
      ...
    print(f"compiling took {clock[0]:.1f} s")
  """
  clock = [0.0]

  def on_event(name: str, duration: float, **_: object) -> None:
    if name in COMPILE_EVENTS:
      clock[0] += duration

  jax.monitoring.register_event_duration_secs_listener(on_event)
  try:
    yield clock
  finally:
    jax.monitoring.unregister_event_duration_listener(on_event)
