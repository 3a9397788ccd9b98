"""Anisotropic smoothing (UCAN, Hong et al.): certified regions of ``x + mu + sigma * eps``.

With per-dimension scales ``sigma`` (all > 0) and a shift ``mu``, the smoothed
classifier ``g(x) = argmax_c P[f(x + mu + sigma * eps) = c]`` (``eps`` unit-scale
base noise) keeps its prediction for every ``delta`` with

    ``||delta / sigma||_p <= R``                     (UCAN Theorem 3.2)

where ``R`` is the isotropic radius of the *unit* base noise (``sigma = 1``) for
the same bound on the top-class probability. Proof: with ``h(u) = f(sigma * u + mu)``
and ``u = x / sigma`` the problem is isotropic. The shift ``mu`` moves the clean
and the perturbed point alike, so the region is centered at ``x`` and does not
depend on ``mu``. The region contains the ball of radius ``min_i sigma_i * R``
(Corollary 3.3), which is what ``AnisotropicCertificate.radius`` reports.

Soundness. The region holds for a ``(mu, sigma)`` that does not depend on the
input: fixed patterns (:func:`pattern_sigma`) or dataset-wise vectors
(:class:`UniversalNoise`) frozen after training. UCAN's certification-wise
generator computes ``mu(x), sigma(x)`` from the input; the classifier deployed at
``x + delta`` then smooths with ``mu(x + delta), sigma(x + delta)``, which the
region around ``x`` says nothing about (the objection of the reviewers, citing
DDRS, ANCER and IDRS: input-dependent noise needs a memory or an IDRS-style
bound). The noise is a sigma source (``rsjax.sigma``): :class:`FrozenNoise`
(rate 0) or :class:`InputDependentNoise` (rate inf); :func:`certify` takes
either (or raw ``sigma``/``mu`` arrays, i.e. ``FrozenNoise``), refuses rate inf
unless ``allow_unsound=True``, and then labels the result ``NOT A CERTIFICATE``.
"""

from rsjax.anisotropic._certify import AnisotropicCertificate as AnisotropicCertificate
from rsjax.anisotropic._certify import certify as certify
from rsjax.anisotropic._generators import FrozenNoise as FrozenNoise
from rsjax.anisotropic._generators import InputDependentNoise as InputDependentNoise
from rsjax.anisotropic._generators import UniversalNoise as UniversalNoise
from rsjax.anisotropic._generators import pattern_sigma as pattern_sigma
from rsjax.anisotropic._generators import universal_loss as universal_loss
from rsjax.anisotropic._region import NORM_ORDERS as NORM_ORDERS
from rsjax.anisotropic._region import alm as alm
from rsjax.anisotropic._region import in_certified_region as in_certified_region
from rsjax.anisotropic._region import isotropic_radius as isotropic_radius
from rsjax.anisotropic._region import normalized_radius as normalized_radius

__all__ = [
    "AnisotropicCertificate",
    "FrozenNoise",
    "InputDependentNoise",
    "NORM_ORDERS",
    "UniversalNoise",
    "alm",
    "certify",
    "in_certified_region",
    "isotropic_radius",
    "normalized_radius",
    "pattern_sigma",
    "universal_loss",
]
