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
bound). The noise is a sigma source (``rsjax.noise.sigma``): :class:`FrozenNoise`
(rate 0) or :class:`InputDependentNoise` (rate inf); :func:`certify` takes
either (or raw ``sigma``/``mu`` arrays, i.e. ``FrozenNoise``), refuses rate inf
unless ``allow_unsound=True``, and then labels the result ``NOT A CERTIFICATE``.
"""

from rsjax import _lazy

__getattr__, __dir__, __all__ = _lazy.exports(
  __name__,
  {
    "UCAN": "rsjax.ucan._certify",
    "METHOD": "rsjax.ucan.method",
    "GENERATORS": "rsjax.ucan._noise_file",
    "NOISE_FILE": "rsjax.ucan._noise_file",
    "SOUND_GENERATORS": "rsjax.ucan._noise_file",
    "load_noise": "rsjax.ucan._noise_file",
    "read_noise": "rsjax.ucan._noise_file",
    "save_noise": "rsjax.ucan._noise_file",
    "load_universal_noise": "rsjax.ucan._noise_file",
    "save_universal_noise": "rsjax.ucan._noise_file",
    "certify_input_dependent": "rsjax.ucan._certify",
    "AnisotropicCertificate": "rsjax.ucan._certify",
    "certify": "rsjax.ucan._certify",
    "FrozenNoise": "rsjax.ucan._generators",
    "InputDependentNoise": "rsjax.ucan._generators",
    "UniversalNoise": "rsjax.ucan._generators",
    "pattern_sigma": "rsjax.ucan._generators",
    "universal_loss": "rsjax.ucan._generators",
    "NORM_ORDERS": "rsjax.ucan._region",
    "alm": "rsjax.ucan._region",
    "in_certified_region": "rsjax.ucan._region",
    "isotropic_radius": "rsjax.ucan._region",
    "normalized_radius": "rsjax.ucan._region",
  },
)
