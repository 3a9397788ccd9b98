"""Denoised smoothing: certify an off-the-shelf classifier behind a denoiser.

* :mod:`~rsjax.denoise.compose`: ``classifier(denoise(x + delta))`` as an
  ordinary base classifier (:func:`denoised`, :class:`Denoised`) for every
  certification method.
* :mod:`~rsjax.denoise.dncnn`: :class:`DnCNN` (Salman et al.'s denoiser).
* :mod:`~rsjax.denoise.diffusion`: the one-step diffusion denoiser (Carlini et
  al.'s sigma-to-timestep rule), the DDPM schedule and loss.
* :mod:`~rsjax.denoise.unet`: diffusers' ``UNet2DModel`` in NNX;
  :mod:`~rsjax.denoise.diffusers_import` loads its diffusers weights.
* :mod:`~rsjax.denoise.openai_unet`: OpenAI's improved/guided-diffusion ``UNetModel`` in NNX;
  :mod:`~rsjax.denoise.openai_import` loads their checkpoints under their flags.
* :mod:`~rsjax.denoise.train`: denoiser training (mse, stability, ddpm);
  :mod:`~rsjax.denoise.workdir`: denoiser directories (``rsjax train-denoiser``,
  ``rsjax certify --denoiser``).

Submodules other than ``compose`` import flax on first use.
"""

from rsjax.denoise.compose import Denoised as Denoised
from rsjax.denoise.compose import as_pure as as_pure
from rsjax.denoise.compose import denoised as denoised
from rsjax.denoise.compose import identity_denoiser as identity_denoiser

__all__ = ["Denoised", "DnCNN", "as_pure", "denoised", "identity_denoiser"]

_LAZY = {"DnCNN": ("rsjax.denoise.dncnn", "DnCNN")}
_SUBMODULES = (
  "diffusers_import",
  "diffusion",
  "dncnn",
  "openai_import",
  "openai_unet",
  "schedules",
  "train",
  "unet",
  "workdir",
)


def __getattr__(name):
  import importlib

  if name in _LAZY:
    module, attr = _LAZY[name]
    return getattr(importlib.import_module(module), attr)
  if name in _SUBMODULES:
    return importlib.import_module(f"rsjax.denoise.{name}")
  raise AttributeError(f"module 'rsjax.denoise' has no attribute {name!r}")
