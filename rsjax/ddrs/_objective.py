"""DDRS's sigma objective: the soft smoothed margin R(sigma) and the ascent's settings.

``SigmaAscent`` (how sigma is ascended), the margin ``R(sigma)`` of one input
under Gaussian or uniform noise, the per-step noise layout and
``smoothing_objective`` (a Monte-Carlo estimate of R). The ascent itself is in
``rsjax.ddrs._sigma``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from rsjax.engine import precision as precision_lib
from rsjax.engine.counts import prepare_inputs
from rsjax.engine.step import ApplyFn, cast_floating
from rsjax.util import as_key, check_int

__all__ = [
  "FAMILIES",
  "PARAMETRIZATIONS",
  "SigmaAscent",
  "check_choice",
  "check_clip",
  "check_inputs",
  "noise",
  "objective",
  "smoothing_objective",
  "unit_noise",
]

#: The two objectives: ``"gaussian"`` (L2, Cohen-style soft margin) and
#: ``"uniform"`` (L1, Yang et al.: noise ``U[-lambda, lambda]^d``, sigma IS lambda).
FAMILIES = ("gaussian", "uniform")
#: How sigma is stepped: ``"sigma"`` (the paper: ascent on sigma) or ``"log"``
#: (ascent on log sigma: ``sigma <- sigma * exp(lr * sigma * dR/dsigma)``).
PARAMETRIZATIONS = ("sigma", "log")

_T = TypeVar("_T")


def objective(
  apply_fn: ApplyFn,
  params: Any,
  x: jax.Array,
  sigma: jax.Array,
  z: jax.Array,
  lo: ArrayLike,
  hi: ArrayLike,
  family: str = "gaussian",
  compute_dtype: DTypeLike | None = None,
) -> jax.Array:
  """R(sigma) of one input: x ``[*shape]``, z ``[n, *shape]`` unit noise, sigma scalar.

  Gaussian: ``sigma/2 (Phi^-1(clip psi_A) - Phi^-1(clip psi_B))``; uniform:
  ``sigma (psi_A - psi_B)`` (no clamp, DDRS §4.4). With ``compute_dtype`` the
  noisy input is cast to it (the parameters are the caller's to cast), as the
  engine does.
  """
  xn = x[None] + sigma * z
  if compute_dtype is not None:
    xn = xn.astype(compute_dtype)
  logits = apply_fn(params, xn)  # [n, C]
  psi = jnp.mean(jax.nn.softmax(logits.astype(jnp.float32), axis=-1), axis=0)
  top2, _ = jax.lax.top_k(psi, 2)  # class not fixed across steps
  if family == "uniform":
    return sigma * (top2[0] - top2[1])
  top2 = jnp.clip(top2, lo, hi)  # zero gradient when saturated, like the in-place clamp
  return sigma / 2 * (jax.scipy.special.ndtri(top2[0]) - jax.scipy.special.ndtri(top2[1]))


def unit_noise(key: jax.Array, family: str, shape: Sequence[int]) -> jax.Array:
  """Unit noise of ``shape``: U[-1, 1] (``"uniform"``) or standard normal, float32."""
  if family == "uniform":
    return jax.random.uniform(key, shape, jnp.float32, minval=-1.0, maxval=1.0)
  return jax.random.normal(key, shape, jnp.float32)


def noise(
  key: jax.Array,
  step: ArrayLike,
  ids: jax.Array,
  shape: Sequence[int],
  num_samples: int,
  family: str = "gaussian",
) -> jax.Array:
  """``[B, n, *shape]`` unit noise; input i at step t from fold_in(fold_in(key, t), id_i).

  ``ids`` is ``[B]`` (integer ids of the inputs), ``shape`` the shape of one input.
  """
  k_t = jax.random.fold_in(key, step)
  keys = jax.vmap(lambda i: jax.random.fold_in(k_t, i))(ids)
  return jax.vmap(lambda k: unit_noise(k, family, (num_samples, *shape)))(keys)


@dataclasses.dataclass(frozen=True)
class SigmaAscent:
  """How sigma is optimized per input (DDRS Algorithm 1; see :func:`optimize_sigma`).

  Attributes:
    steps: K, number of ascent steps (paper 100).
    lr: step size alpha (paper 1e-4).
    num_samples: noise samples per step (paper 1).
    clip: ``(lo, hi)`` clamp of psi (DDRS scripts (0.02, 0.98); Gaussian only).
    sigma_min: lower bound kept on sigma.
    family: ``"gaussian"`` (L2) or ``"uniform"`` (L1, sigma = lambda).
    parametrization: ``"sigma"`` (the paper) or ``"log"`` (ascent on log sigma).
  """

  steps: int = 100
  lr: float = 1e-4
  num_samples: int = 1
  clip: tuple[float, float] = (0.02, 0.98)
  sigma_min: float = 1e-3
  family: str = "gaussian"
  parametrization: str = "sigma"

  def __post_init__(self) -> None:
    def set_(name: str, value: object) -> None:  # frozen: normalize
      object.__setattr__(self, name, value)

    set_("steps", check_int("steps", self.steps, 0))
    set_("num_samples", check_int("num_samples", self.num_samples, 1))
    check_choice("family", self.family, FAMILIES)
    check_choice("parametrization", self.parametrization, PARAMETRIZATIONS)
    set_("lr", float(self.lr))
    set_("sigma_min", float(self.sigma_min))
    if not np.isfinite(self.lr) or self.lr < 0:
      raise ValueError(f"lr must be finite and >= 0, got {self.lr!r}")
    if not np.isfinite(self.sigma_min) or self.sigma_min <= 0:
      raise ValueError(f"sigma_min must be finite and > 0, got {self.sigma_min!r}")
    set_("clip", check_clip(self.clip))

  @classmethod
  def of(cls, config: SigmaAscent | None = None, **fields: Any) -> SigmaAscent:
    """``config`` (default ``SigmaAscent()``) with ``fields`` replaced."""
    config = cls() if config is None else config
    if not isinstance(config, cls):
      raise ValueError(f"config must be a SigmaAscent, got {config!r}")
    return dataclasses.replace(config, **fields) if fields else config


def check_choice(name: str, v: _T, choices: Sequence[object]) -> _T:
  if v not in choices:
    raise ValueError(f"{name} must be one of {choices}, got {v!r}")
  return v


def check_clip(clip: Iterable[float]) -> tuple[float, float]:
  try:
    lo, hi = (float(c) for c in clip)
  except (TypeError, ValueError):
    raise ValueError(f"clip must be a pair (lo, hi), got {clip!r}") from None
  if not 0.0 < lo < hi < 1.0:
    raise ValueError(f"clip must satisfy 0 < lo < hi < 1, got {clip!r}")
  return lo, hi


@functools.partial(jax.jit, static_argnames=("apply_fn", "num_samples", "family", "compute_dtype"))
def _evaluate(
  key: jax.Array,
  params: Any,
  x: jax.Array,
  sigma: jax.Array,
  ids: jax.Array,
  lo: ArrayLike,
  hi: ArrayLike,
  *,
  apply_fn: ApplyFn,
  num_samples: int,
  family: str,
  compute_dtype: DTypeLike | None,
) -> jax.Array:
  z = noise(key, 0, ids, x.shape[1:], num_samples, family)
  params = cast_floating(params, compute_dtype)
  fn = functools.partial(objective, apply_fn, params, family=family, compute_dtype=compute_dtype)
  return jax.vmap(fn, in_axes=(0, 0, 0, None, None))(x, sigma, z, lo, hi)


def check_inputs(
  x: ArrayLike, sigma: ArrayLike, ids: ArrayLike | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """``x`` ``[B, *shape]``, ``sigma`` (a float or ``[B]``) and ``ids`` ``[B]`` (or None) in
  engine form: float32 inputs, float32 ``[B]`` sigmas and int ids."""
  x_np, _, ids_arr = prepare_inputs(x, 1.0, ids)
  b = x_np.shape[0]
  sig = np.asarray(sigma, np.float64)
  if sig.ndim == 0:
    sig = np.full((b,), float(sig))
  if sig.shape != (b,):
    raise ValueError(f"sigma0/sigma must be a float or of shape [B]={(b,)}, got shape {sig.shape}")
  if not np.all(np.isfinite(sig)) or np.any(sig <= 0):
    raise ValueError("sigma0/sigma must be finite and > 0")
  return x_np, sig.astype(np.float32), ids_arr


def smoothing_objective(
  key: jax.Array | int,
  apply_fn: Callable,
  params: Any,
  x: ArrayLike,
  *,
  sigma: ArrayLike,
  num_samples: int = 256,
  clip: tuple[float, float] = (0.02, 0.98),
  ids: ArrayLike | None = None,
  family: str = "gaussian",
  precision: str | None = None,
) -> np.ndarray:
  """Monte-Carlo estimate of R(sigma) per input (the quantity ``optimize_sigma`` ascends).

  Args:
    key: ``jax.random.key`` or int seed (same noise layout as ``optimize_sigma`` step 0).
    apply_fn: ``apply_fn(params, x) -> logits`` (hashable).
    params: pytree for ``apply_fn``.
    x: ``[B, *input_shape]`` inputs.
    sigma: float or ``[B]``.
    num_samples: noise samples per input.
    clip: ``(lo, hi)`` clamp of psi.
    ids: ``[B]`` dataset indices.
    family: ``"gaussian"`` or ``"uniform"`` (see ``optimize_sigma``).
    precision: the declared precision (``rsjax.engine.precision``; default ``"float32"``).

  Returns:
    ``[B]`` float32 NumPy array of R estimates.
  """
  num_samples = check_int("num_samples", num_samples, 1)
  check_choice("family", family, FAMILIES)
  lo, hi = check_clip(clip)
  x_np, sig, ids_arr = check_inputs(x, sigma, ids)
  out = precision_lib.traced_call(
    precision,
    _evaluate,
    as_key(key),
    params,
    x_np,
    sig,
    ids_arr,
    np.float32(lo),
    np.float32(hi),
    apply_fn=apply_fn,
    num_samples=num_samples,
    family=family,
  )
  return np.asarray(jax.device_get(out), np.float32)
