"""One-step diffusion denoising (Carlini et al., ICLR 2023) and DDPM training.

The smoothing noise stays in the certification engine, in the [0, 1] input scale with the exact
sigma. The denoiser is a deterministic function of the noisy input ``y = x + delta``:

* the diffusion model works in ``[-1, 1]`` (``2y - 1``), where the noise is ``2 sigma``;
* pick the timestep ``t*``: the smallest ``t >= 1`` with ``(1 - a_t) / a_t >= (2 sigma)^2``
  (``a_t`` = alpha-bar, the cumulative product of ``1 - beta``; Carlini et al.'s rule,
  rounding up);
* ``x_t = sqrt(a_t*) (2y - 1)``; ``x0 = (x_t - sqrt(1 - a_t*) eps(x_t, t*)) / sqrt(a_t*)``,
  clipped to ``[-1, 1]``; returned as ``(x0 + 1) / 2`` in [0, 1] for the classifier.

As ``t*`` and the scaling are fixed before certification, the certificate holds for sigma
whatever ``t*`` is; ``t*`` affects only accuracy.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.typing import ArrayLike

__all__ = [
  "linear_schedule",
  "cosine_schedule",
  "openai_schedule",
  "schedule_from",
  "timestep_for_sigma",
  "OneStep",
  "one_step_denoiser",
  "ddpm_loss",
]


def linear_schedule(
  num_steps: int = 1000, beta_start: float = 1e-4, beta_end: float = 0.02
) -> np.ndarray:
  """``[num_steps]`` float64 alpha-bar of DDPM's linear beta schedule (google/ddpm-cifar10-32:
  1000 steps, betas 1e-4 to 0.02)."""
  if num_steps < 2 or not 0 < beta_start < beta_end < 1:
    raise ValueError(
      f"need num_steps >= 2 and 0 < beta_start < beta_end < 1, got {num_steps}, "
      f"{beta_start}, {beta_end}"
    )
  betas = np.linspace(beta_start, beta_end, num_steps, dtype=np.float64)
  return np.cumprod(1.0 - betas)


def cosine_schedule(num_steps: int = 4000, *, max_beta: float = 0.999) -> np.ndarray:
  """``[num_steps]`` float64 alpha-bar of the cosine schedule (Nichol & Dhariwal 2021).

  ``f(u) = cos((u + 0.008) / 1.008 * pi / 2)^2``; ``beta_i = min(1 - f((i+1)/n) / f(i/n),
  max_beta)``; alpha-bar the cumulative product of ``1 - beta`` (improved-diffusion's
  ``betas_for_alpha_bar``; diffusers' ``squaredcos_cap_v2``).
  """
  if num_steps < 2:
    raise ValueError(f"need num_steps >= 2, got {num_steps}")
  f = lambda u: math.cos((u + 0.008) / 1.008 * math.pi / 2) ** 2  # noqa: E731
  betas = [min(1 - f((i + 1) / num_steps) / f(i / num_steps), max_beta) for i in range(num_steps)]
  return np.cumprod(1.0 - np.asarray(betas, np.float64))


def openai_schedule(name: str, num_steps: int) -> np.ndarray:
  """improved/guided-diffusion's ``get_named_beta_schedule(name, num_steps)`` as alpha-bar.

  ``"linear"``: betas from ``1e-4 * 1000 / n`` to ``0.02 * 1000 / n`` (DDPM's, scaled to any step
  count); ``"cosine"``: :func:`cosine_schedule`.
  """
  if name == "linear":
    scale = 1000.0 / num_steps
    return linear_schedule(num_steps, scale * 1e-4, scale * 0.02)
  if name == "cosine":
    return cosine_schedule(num_steps)
  raise ValueError(f"unknown OpenAI noise_schedule {name!r} (linear or cosine)")


def schedule_from(spec: Mapping[str, Any]) -> np.ndarray:
  """The alpha-bar schedule a denoiser config names.

  ``{"kind": "openai", "name": "cosine", "num_steps": 4000}``, ``{"kind": "alphas_cumprod",
  "values": [...]}``, or ``linear_schedule`` keywords (optionally with ``"kind": "linear"``).
  """
  spec = dict(spec)
  kind = spec.pop("kind", "linear")
  if kind == "linear":
    return linear_schedule(**spec)
  if kind == "openai":
    return openai_schedule(spec["name"], int(spec["num_steps"]))
  if kind == "alphas_cumprod":
    return np.asarray(spec["values"], np.float64)
  raise ValueError(f"unknown schedule kind {kind!r} (linear, openai or alphas_cumprod)")


def timestep_for_sigma(alphas_cumprod: ArrayLike, sigma: float) -> int:
  """The smallest ``t >= 1`` with ``sqrt((1 - a_t) / a_t) >= 2 sigma`` (Carlini et al.'s rule).

  Raises:
    ValueError: sigma <= 0 or beyond the schedule's largest noise level.
  """
  a = np.asarray(alphas_cumprod, np.float64)
  if not (math.isfinite(sigma) and sigma > 0):
    raise ValueError(f"sigma must be > 0, got {sigma!r}")
  with np.errstate(divide="ignore"):  # a zero-terminal-SNR schedule ends with a_T = 0
    level = np.sqrt((1.0 - a) / a)
  ok = np.nonzero(level[1:] >= 2.0 * sigma)[0]
  if not len(ok):
    raise ValueError(
      f"sigma {sigma} is above the schedule's largest noise level "
      f"{level[-1] / 2:.4g} (in [0, 1] units)"
    )
  return int(ok[0]) + 1


@dataclasses.dataclass(frozen=True)
class OneStep:
  """``denoise(params, y [b, H, W, C] in [0, 1]) -> x0 [b, H, W, C] in [0, 1]``, one step.

  Attributes:
    eps_fn: ``eps_fn(params, x_t [b, H, W, C], t [b]) -> eps`` (a noise-predicting model).
    t: the timestep (``timestep_for_sigma``).
    alpha_bar: ``a_t`` at ``t``.
    clip: clip ``x0`` to ``[-1, 1]`` (as Carlini et al. and diffusers' ``clip_sample``).
    timestep_scale: the network receives ``t * timestep_scale`` as a float (improved-diffusion's
      ``rescale_timesteps``: ``1000 / num_steps``); 1.0: the integer ``t``.
  """

  eps_fn: Callable
  t: int
  alpha_bar: float
  clip: bool = True
  timestep_scale: float = 1.0

  def __call__(self, params: Any, y: jax.Array) -> jax.Array:
    sa, s1a = math.sqrt(self.alpha_bar), math.sqrt(1.0 - self.alpha_bar)
    x_t = sa * (2.0 * y - 1.0)
    if self.timestep_scale == 1.0:
      t = jnp.full((y.shape[0],), self.t, jnp.int32)
    else:
      t = jnp.full((y.shape[0],), self.t * self.timestep_scale, jnp.float32)
    x0 = (x_t - s1a * self.eps_fn(params, x_t, t)) / sa
    if self.clip:
      x0 = jnp.clip(x0, -1.0, 1.0)
    return (x0 + 1.0) / 2.0


@dataclasses.dataclass(frozen=True)
class _EpsApply:
  graphdef: Any

  def __call__(self, state, x, t):
    from flax import nnx

    return nnx.merge(self.graphdef, state, copy=True)(x, t)


@dataclasses.dataclass(frozen=True)
class _FirstChannels:
  """A learned-variance model's epsilon: the first ``channels`` output channels."""

  fn: Callable
  channels: int

  def __call__(self, params: Any, x: jax.Array, t: jax.Array) -> jax.Array:
    return self.fn(params, x, t)[..., : self.channels]


def eps_apply(model: Any) -> tuple[Callable, Any]:
  """Pure ``(eps_fn, state)`` of an NNX noise model ``model(x, t)`` (hashable, jit-static)."""
  from flax import nnx

  graphdef, state = nnx.split(model)
  return _EpsApply(graphdef), state


def one_step_denoiser(
  model: Any,
  *,
  sigma: float,
  alphas_cumprod: ArrayLike,
  params: Any = None,
  clip: bool = True,
  timestep_scale: float = 1.0,
  eps_channels: int | None = None,
) -> tuple[OneStep, Any]:
  """The one-step diffusion denoiser for noise level ``sigma`` and its params.

  Args:
    model: an NNX noise model ``model(x, t)`` (e.g. :class:`rsjax.models.denoise.unet.UNet2DModel`)
      or a pure ``eps_fn(params, x, t)`` (then give ``params``).
    sigma: the smoothing noise level, in [0, 1] input units.
    alphas_cumprod: the model's alpha-bar schedule (``linear_schedule()``).
    params: params of a function ``model``.
    clip: clip the estimate to the data range.
    timestep_scale: the network receives ``t * timestep_scale`` (``OneStep.timestep_scale``).
    eps_channels: use the first ``eps_channels`` output channels as epsilon (a learned-variance
      model returning ``[eps, variance]``); None: the whole output.

  Returns:
    ``(denoise_fn, params)`` for :func:`rsjax.models.denoise.denoised`.
  """
  t = timestep_for_sigma(alphas_cumprod, sigma)
  fn, params = (model, params) if callable(model) and params is not None else eps_apply(model)
  if eps_channels is not None:
    fn = _FirstChannels(fn, int(eps_channels))
  a_t = float(np.asarray(alphas_cumprod, np.float64)[t])
  return OneStep(fn, t, a_t, clip, float(timestep_scale)), params


def ddpm_loss(
  key: jax.Array,
  eps_fn: Callable[..., jax.Array],
  params: Any,
  x: ArrayLike,
  *,
  alphas_cumprod: ArrayLike,
  t_max: int | None = None,
) -> jax.Array:
  """DDPM's simple loss ``E |eps - eps_theta(sqrt(a_t) x0 + sqrt(1 - a_t) eps, t)|^2``.

  Args:
    key: PRNG key (timesteps and noise).
    eps_fn: ``eps_fn(params, x_t, t) -> eps``.
    params: the model's params.
    x: ``[b, H, W, C]`` clean images in [0, 1] (mapped to ``[-1, 1]``).
    alphas_cumprod: the schedule.
    t_max: draw ``t`` uniformly from ``[0, t_max)`` (default: the whole schedule).

  Returns:
    The scalar mean squared error.
  """
  a = jnp.asarray(alphas_cumprod, jnp.float32)
  t_max = a.shape[0] if t_max is None else t_max
  kt, ke = jax.random.split(key)
  t = jax.random.randint(kt, (x.shape[0],), 0, t_max)
  eps = jax.random.normal(ke, x.shape, jnp.float32)
  at = a[t].reshape((-1,) + (1,) * (x.ndim - 1))
  x_t = jnp.sqrt(at) * (2.0 * x - 1.0) + jnp.sqrt(1.0 - at) * eps
  return optax.l2_loss(eps_fn(params, x_t, t), eps).mean() * 2.0
