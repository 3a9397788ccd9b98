"""A diffusers scheduler config as the one-step denoiser's schedule: applied or refused.

The one-step denoiser needs the *training* schedule (alpha-bar at every training timestep), the
prediction type and the clipping of the estimate. Every field of diffusers' ``DDPMScheduler`` /
``DDIMScheduler`` configs is one of:

* applied: ``num_train_timesteps``, ``beta_start``, ``beta_end``, ``beta_schedule`` (``linear``,
  ``scaled_linear``, ``squaredcos_cap_v2``), ``trained_betas``, ``rescale_betas_zero_snr``,
  ``clip_sample``, ``variance_type`` (``learned`` / ``learned_range``: the UNet's first half of
  output channels is epsilon);
* refused with one line: another ``beta_schedule`` (``sigmoid``), ``prediction_type`` other than
  ``epsilon``, ``thresholding``, ``clip_sample_range`` other than 1 with clipping;
* without effect on one step at a training timestep, so ignored: ``timestep_spacing``,
  ``steps_offset`` (they place the *inference* timesteps of a multi-step sampler),
  ``set_alpha_to_one`` (DDIM's last sampling step), the other variance types (the sampler's
  variance), ``dynamic_thresholding_ratio`` and ``sample_max_value`` (used only with thresholding).

Any other field is refused, so a scheduler that changes the schedule some new way is never read
as a plain linear one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rsjax.models.denoise.diffusion import cosine_schedule

__all__ = ["diffusers_schedule", "DiffusersSchedule"]

_IGNORED = {
  "_class_name",
  "_diffusers_version",
  "_use_default_values",
  "timestep_spacing",
  "steps_offset",
  "set_alpha_to_one",
  "dynamic_thresholding_ratio",
  "sample_max_value",
}
# The applied fields and diffusers' defaults for them.
_APPLIED = {
  "num_train_timesteps": 1000,
  "beta_start": 1e-4,
  "beta_end": 0.02,
  "beta_schedule": "linear",
  "trained_betas": None,
  "rescale_betas_zero_snr": False,
  "clip_sample": True,
  "clip_sample_range": 1.0,
  "variance_type": "fixed_small",
  "prediction_type": "epsilon",
  "thresholding": False,
}
_CLASSES = ("DDPMScheduler", "DDIMScheduler")


class DiffusersSchedule(dict):
  """``alphas_cumprod`` (float64 list), ``clip`` (bool), ``learned_variance`` (bool)."""


def _rescale_zero_terminal_snr(betas: np.ndarray) -> np.ndarray:
  """Lin et al. (2024): shift and scale sqrt(alpha-bar) so that the last is 0, the first kept."""
  s = np.sqrt(np.cumprod(1.0 - betas))
  s0, s_last = s[0], s[-1]
  s = (s - s_last) * s0 / (s0 - s_last)
  bar = s**2
  alphas = np.concatenate([bar[:1], bar[1:] / bar[:-1]])
  return 1.0 - alphas


def diffusers_schedule(config: Mapping[str, Any], *, where: str = "scheduler") -> DiffusersSchedule:
  """The one-step denoiser's schedule of a diffusers scheduler ``config`` (see the module doc).

  Raises:
    ValueError: a refused or unknown field (one line, naming ``where``).
  """
  cls = config.get("_class_name", "DDPMScheduler")
  if cls not in _CLASSES:
    raise ValueError(f"{where}: scheduler {cls!r} is not supported (only {', '.join(_CLASSES)})")
  if unknown := sorted(set(config) - _IGNORED - set(_APPLIED)):
    raise ValueError(f"{where}: scheduler fields {unknown} are not supported")
  c = {**_APPLIED, **config}
  if c["prediction_type"] != "epsilon":
    raise ValueError(
      f"{where}: prediction_type {c['prediction_type']!r} is not supported (only 'epsilon')"
    )
  if c["thresholding"]:
    raise ValueError(f"{where}: thresholding=True (dynamic thresholding) is not supported")
  if c["clip_sample"] and float(c["clip_sample_range"]) != 1.0:
    raise ValueError(f"{where}: clip_sample_range {c['clip_sample_range']} is not supported (1.0)")
  n = int(c["num_train_timesteps"])
  kind = c["beta_schedule"]
  if c["trained_betas"] is not None:
    betas = np.asarray(c["trained_betas"], np.float64)
    if betas.ndim != 1 or len(betas) < 2 or not np.all((betas > 0) & (betas < 1)):
      raise ValueError(f"{where}: trained_betas must be a list of at least 2 values in (0, 1)")
  elif kind == "linear":
    betas = np.linspace(c["beta_start"], c["beta_end"], n, dtype=np.float64)
  elif kind == "scaled_linear":
    betas = np.linspace(c["beta_start"] ** 0.5, c["beta_end"] ** 0.5, n, dtype=np.float64) ** 2
  elif kind == "squaredcos_cap_v2":
    a = cosine_schedule(n)
    betas = 1.0 - np.concatenate([a[:1], a[1:] / a[:-1]])
  else:
    raise ValueError(
      f"{where}: beta_schedule {kind!r} is not supported "
      "(linear, scaled_linear, squaredcos_cap_v2 or trained_betas)"
    )
  if c["rescale_betas_zero_snr"]:
    betas = _rescale_zero_terminal_snr(betas)
  return DiffusersSchedule(
    alphas_cumprod=np.cumprod(1.0 - betas).tolist(),
    clip=bool(c["clip_sample"]),
    learned_variance=c["variance_type"] in ("learned", "learned_range"),
  )
