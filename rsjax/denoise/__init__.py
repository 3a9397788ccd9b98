"""Denoised smoothing: certify an off-the-shelf classifier behind a denoiser.

* :mod:`~rsjax.denoise.compose`: ``classifier(denoise(x + delta))`` as an
  ordinary base classifier (:func:`denoised`, :class:`Denoised`) for every
  certification method.
"""

from rsjax.denoise.compose import Denoised as Denoised
from rsjax.denoise.compose import as_pure as as_pure
from rsjax.denoise.compose import denoised as denoised
from rsjax.denoise.compose import identity_denoiser as identity_denoiser

__all__ = ["Denoised", "as_pure", "denoised", "identity_denoiser"]
