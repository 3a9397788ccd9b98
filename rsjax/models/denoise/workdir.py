"""A denoiser's directory: ``denoiser.json`` (what to rebuild) and an orbax checkpoint.

``denoiser.json`` holds ``kind`` (``"dncnn"`` or ``"ddpm"``), ``model_kwargs``,
``input_shape``, for a DDPM its ``schedule`` (``linear_schedule`` keywords), and what it was
trained with (dataset, objective, sigma, settings, history). A diffusers ``UNet2DModel``
directory (``save_pretrained``; or a pipeline directory with ``unet/``) also loads, with the
schedule of its ``scheduler_config.json`` (required); so does an OpenAI improved/guided-diffusion
checkpoint beside an ``openai_flags.json`` (:mod:`rsjax.models.denoise.openai_import`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from flax import nnx

from rsjax.models import restore_model, write_checkpointed
from rsjax.models.denoise import diffusion
from rsjax.models.denoise.dncnn import DnCNN
from rsjax.models.denoise.openai_import import FLAGS_FILE, load_openai_dir
from rsjax.models.denoise.schedules import diffusers_schedule
from rsjax.models.denoise.unet import UNet2DModel, UNetConfig
from rsjax.records import canonical

__all__ = ["DENOISER_FILE", "build_denoiser", "save_denoiser", "load_denoiser", "denoiser_fn"]

DENOISER_FILE = "denoiser.json"
KINDS = ("dncnn", "ddpm")


def build_denoiser(kind: str, model_kwargs: dict, *, rngs: int | nnx.Rngs = 0) -> nnx.Module:
  """A fresh denoiser model: ``"dncnn"`` (:class:`DnCNN`) or ``"ddpm"`` (:class:`UNet2DModel`)."""
  if kind == "dncnn":
    return DnCNN(**model_kwargs, rngs=rngs)
  if kind == "ddpm":
    return UNet2DModel(UNetConfig(**model_kwargs), rngs=rngs)
  raise ValueError(f"denoiser kind must be one of {KINDS}, got {kind!r}")


def save_denoiser(out: str | os.PathLike, model: nnx.Module, config: dict) -> None:
  """Writes ``config`` (with ``kind``, ``model_kwargs``, ``input_shape``) and the weights."""
  for name in ("kind", "model_kwargs", "input_shape"):
    if name not in config:
      raise ValueError(f"denoiser config needs {name!r}; got keys {sorted(config)}")
  write_checkpointed(out, DENOISER_FILE, model, config)


def _diffusers_dir(path: str) -> tuple[str, dict[str, Any]] | None:
  """``(unet_dir, schedule spec)`` of a diffusers UNet or pipeline directory, or None.

  The schedule comes from the scheduler's config (every field applied or refused:
  :func:`rsjax.models.denoise.schedules.diffusers_schedule`); a directory without one is an error,
  not a linear guess.
  """
  unet_dir = os.path.join(path, "unet") if os.path.isdir(os.path.join(path, "unet")) else path
  cfg = os.path.join(unet_dir, "config.json")
  if not os.path.exists(cfg):
    return None
  with open(cfg, encoding="utf-8") as f:
    if json.load(f).get("_class_name") != "UNet2DModel":
      return None
  for sched in (
    os.path.join(path, "scheduler", "scheduler_config.json"),
    os.path.join(unet_dir, "scheduler_config.json"),
  ):
    if os.path.exists(sched):
      with open(sched, encoding="utf-8") as f:
        s = diffusers_schedule(json.load(f), where=sched)
      spec = {"kind": "alphas_cumprod", "values": s["alphas_cumprod"]}
      return unet_dir, {"schedule": spec, "clip": s["clip"], "learned": s["learned_variance"]}
  raise ValueError(
    f"{path}: no scheduler_config.json (nor scheduler/ of a pipeline): the UNet's noise "
    "schedule cannot be guessed; save the scheduler with the UNet"
  )


def load_denoiser(path: str | os.PathLike) -> tuple[nnx.Module, dict[str, Any]]:
  """``(model, config)`` of a denoiser directory, a diffusers UNet2DModel directory (with its
  scheduler's config) or an OpenAI checkpoint directory (``openai_flags.json``).

  Raises:
    FileNotFoundError: not a denoiser directory.
  """
  path = os.fspath(path)
  file = os.path.join(path, DENOISER_FILE)
  model: nnx.Module
  if os.path.exists(os.path.join(path, FLAGS_FILE)):
    model, info = load_openai_dir(path)
    return model, {"kind": "openai", "source": "openai", **info}
  if not os.path.exists(file):
    found = _diffusers_dir(path) if os.path.isdir(path) else None
    if found is None:
      raise FileNotFoundError(
        f"{path!r} is not a denoiser directory (no {DENOISER_FILE}; write "
        "one with 'rsjax train-denoiser') nor a diffusers UNet2DModel one"
      )
    from rsjax.models.denoise.diffusers_import import load_diffusers_dir

    unet_dir, found_schedule = found
    unet = load_diffusers_dir(unet_dir)
    cfg = unet.config
    learned = found_schedule.pop("learned")
    if (cfg.out_channels == 2 * cfg.in_channels) != learned:
      raise ValueError(
        f"{path}: a UNet with {cfg.out_channels} output channels for {cfg.in_channels} input "
        f"channels does not fit the scheduler's variance_type ("
        f"{'learned' if learned else 'not learned'})"
      )
    if learned:
      found_schedule["eps_channels"] = cfg.in_channels
    return unet, {"kind": "ddpm", "source": "diffusers", **found_schedule}
  with open(file, encoding="utf-8") as f:
    config = json.load(f)
  model = build_denoiser(config["kind"], config["model_kwargs"])
  restore_model(path, model)
  return model, config


def denoiser_fn(path: str | os.PathLike, *, sigma: float) -> tuple[Callable, Any, dict[str, Any]]:
  """``(denoise_fn, params, config)`` of a denoiser directory for noise level ``sigma``:
  a DnCNN in eval mode, or a DDPM as the one-step denoiser at ``timestep_for_sigma``.

  ``config["digest"]`` is :func:`denoiser_digest`: what defines the denoiser's function
  besides its weights (a run record binds it, as the classifier's configuration)."""
  from rsjax.models import to_apply_fn

  model, config = load_denoiser(path)
  if config["kind"] == "dncnn":
    fn, params = to_apply_fn(model)
    return fn, params, {**config, "digest": denoiser_digest(model, config)}
  schedule = diffusion.schedule_from(config.get("schedule", {}))
  step, params = diffusion.one_step_denoiser(
    model,
    sigma=sigma,
    alphas_cumprod=schedule,
    clip=config.get("clip", True),
    timestep_scale=config.get("timestep_scale", 1.0),
    eps_channels=config.get("eps_channels"),
  )
  digest = denoiser_digest(model, config, schedule=schedule, timestep=step.t)
  return step, params, {**config, "timestep": step.t, "digest": digest}


def denoiser_digest(
  model: nnx.Module,
  config: Mapping[str, Any],
  *,
  schedule: np.ndarray | None = None,
  timestep: int | None = None,
) -> str:
  """The SHA-256 (hex) of what makes a denoiser's function besides its parameters: its
  settings (``denoiser.json``, a diffusers scheduler's or OpenAI's flags: clip, timestep
  scale, ...), its architecture (the model's ``config``, e.g. a UNet's group norm or
  sinusoid settings that no weight shape shows), the resolved alpha-bar ``schedule [T]``
  (float64 bytes) and the ``timestep`` chosen for the run's sigma."""
  arch = getattr(model, "config", None)
  settings = {k: v for k, v in config.items() if k not in ("schedule", "digest")}
  value = {
    "settings": settings,
    "architecture": dataclasses.asdict(arch) if dataclasses.is_dataclass(arch) else None,
    "schedule_sha256": None
    if schedule is None
    else hashlib.sha256(np.ascontiguousarray(schedule, np.float64).tobytes()).hexdigest(),
    "timestep": None if timestep is None else int(timestep),
  }
  return canonical.digest(json.loads(json.dumps(value, default=_plain)))


def _plain(v: Any) -> Any:
  """A NumPy value, tuple or other object of a denoiser's settings as plain JSON."""
  if hasattr(v, "tolist"):
    return v.tolist()
  return str(v)
