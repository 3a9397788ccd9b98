"""Denoised smoothing: certify an off-the-shelf classifier behind a denoiser.

* :mod:`~rsjax.models.denoise.compose`: ``classifier(denoise(x + delta))`` as an
  ordinary base classifier (:func:`denoised`, :class:`Denoised`) for every
  certification method.
* :mod:`~rsjax.models.denoise.dncnn`: :class:`DnCNN` (Salman et al.'s denoiser).
* :mod:`~rsjax.models.denoise.diffusion`: the one-step diffusion denoiser (Carlini et
  al.'s sigma-to-timestep rule), the DDPM schedule and loss.
* :mod:`~rsjax.models.denoise.unet`: diffusers' ``UNet2DModel`` in NNX;
  :mod:`~rsjax.models.denoise.diffusers_import` loads its diffusers weights.
* :mod:`~rsjax.models.denoise.openai_unet`: OpenAI's improved/guided-diffusion ``UNetModel`` in NNX;
  :mod:`~rsjax.models.denoise.openai_import` loads their checkpoints under their flags.
* :mod:`~rsjax.models.denoise.train`: denoiser training (mse, stability, ddpm);
  :mod:`~rsjax.models.denoise.workdir`: denoiser directories (``rsjax train-denoiser``,
  ``rsjax certify --denoiser``).

Submodules other than ``compose`` import flax on first use.
"""

from rsjax.models.denoise.compose import Denoised as Denoised
from rsjax.models.denoise.compose import as_pure as as_pure
from rsjax.models.denoise.compose import denoised as denoised
from rsjax.models.denoise.compose import identity_denoiser as identity_denoiser

__all__ = ["Denoised", "DnCNN", "as_pure", "denoised", "identity_denoiser"]

_LAZY = {"DnCNN": ("rsjax.models.denoise.dncnn", "DnCNN")}
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
    return importlib.import_module(f"rsjax.models.denoise.{name}")
  raise AttributeError(f"module 'rsjax.models.denoise' has no attribute {name!r}")
