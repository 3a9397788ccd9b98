"""A denoiser's directory: ``denoiser.json`` (what to rebuild) and an orbax checkpoint.

``denoiser.json`` holds ``kind`` (``"dncnn"`` or ``"ddpm"``), ``model_kwargs``,
``input_shape``, for a DDPM its ``schedule`` (``linear_schedule`` keywords), and what it was
trained with (dataset, objective, sigma, settings, history). A diffusers ``UNet2DModel``
directory (``save_pretrained``; or a pipeline directory with ``unet/``) also loads, with the
linear DDPM schedule of its ``scheduler_config.json`` when present.
"""

from __future__ import annotations

import json
import os

from flax import nnx

from rsjax.denoise import diffusion
from rsjax.denoise.dncnn import DnCNN
from rsjax.denoise.unet import UNet2DModel, UNetConfig
from rsjax.models import restore_model, write_checkpointed

__all__ = ["DENOISER_FILE", "build_denoiser", "save_denoiser", "load_denoiser", "denoiser_fn"]

DENOISER_FILE = "denoiser.json"
KINDS = ("dncnn", "ddpm")


def build_denoiser(kind: str, model_kwargs: dict, *, rngs=0) -> nnx.Module:
  """A fresh denoiser model: ``"dncnn"`` (:class:`DnCNN`) or ``"ddpm"`` (:class:`UNet2DModel`)."""
  if kind == "dncnn":
    return DnCNN(**model_kwargs, rngs=rngs)
  if kind == "ddpm":
    return UNet2DModel(UNetConfig(**model_kwargs), rngs=rngs)
  raise ValueError(f"denoiser kind must be one of {KINDS}, got {kind!r}")


def save_denoiser(out, model: nnx.Module, config: dict) -> None:
  """Writes ``config`` (with ``kind``, ``model_kwargs``, ``input_shape``) and the weights."""
  for name in ("kind", "model_kwargs", "input_shape"):
    if name not in config:
      raise ValueError(f"denoiser config needs {name!r}; got keys {sorted(config)}")
  write_checkpointed(out, DENOISER_FILE, model, config)


def _diffusers_dir(path: str):
  """``(unet_dir, schedule kwargs)`` of a diffusers UNet or pipeline directory, or None."""
  unet_dir = os.path.join(path, "unet") if os.path.isdir(os.path.join(path, "unet")) else path
  cfg = os.path.join(unet_dir, "config.json")
  if not os.path.exists(cfg):
    return None
  with open(cfg, encoding="utf-8") as f:
    if json.load(f).get("_class_name") != "UNet2DModel":
      return None
  schedule = {}
  for sched in (
    os.path.join(path, "scheduler", "scheduler_config.json"),
    os.path.join(unet_dir, "scheduler_config.json"),
  ):
    if os.path.exists(sched):
      with open(sched, encoding="utf-8") as f:
        s = json.load(f)
      if (
        s.get("beta_schedule", "linear") != "linear"
        or s.get("prediction_type", "epsilon") != "epsilon"
      ):
        raise ValueError(
          f"{sched}: only the linear beta schedule with epsilon prediction is supported"
        )
      schedule = dict(
        num_steps=s.get("num_train_timesteps", 1000),
        beta_start=s.get("beta_start", 1e-4),
        beta_end=s.get("beta_end", 0.02),
      )
      break
  return unet_dir, schedule


def load_denoiser(path) -> tuple[nnx.Module, dict]:
  """``(model, config)`` of a denoiser directory (or a diffusers UNet2DModel directory).

  Raises:
    FileNotFoundError: not a denoiser directory.
  """
  path = os.fspath(path)
  file = os.path.join(path, DENOISER_FILE)
  if not os.path.exists(file):
    found = _diffusers_dir(path) if os.path.isdir(path) else None
    if found is None:
      raise FileNotFoundError(
        f"{path!r} is not a denoiser directory (no {DENOISER_FILE}; write "
        "one with 'rsjax train-denoiser') nor a diffusers UNet2DModel one"
      )
    from rsjax.denoise.diffusers_import import load_diffusers_dir

    unet_dir, schedule = found
    model = load_diffusers_dir(unet_dir)
    return model, {"kind": "ddpm", "source": "diffusers", "schedule": schedule}
  with open(file, encoding="utf-8") as f:
    config = json.load(f)
  model = build_denoiser(config["kind"], config["model_kwargs"])
  restore_model(path, model)
  return model, config


def denoiser_fn(path, *, sigma: float):
  """``(denoise_fn, params, config)`` of a denoiser directory for noise level ``sigma``:
  a DnCNN in eval mode, or a DDPM as the one-step denoiser at ``timestep_for_sigma``."""
  from rsjax.models import to_apply_fn

  model, config = load_denoiser(path)
  if config["kind"] == "dncnn":
    fn, params = to_apply_fn(model)
    return fn, params, config
  schedule = diffusion.linear_schedule(**config.get("schedule", {}))
  fn, params = diffusion.one_step_denoiser(model, sigma=sigma, alphas_cumprod=schedule)
  return fn, params, {**config, "timestep": fn.t}
