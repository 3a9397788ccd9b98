"""Dual randomized smoothing (Sun, Mao and Vechev, ICLR 2026): a per-input sigma chosen by a
smoothed sigma estimator, whose choice is certified too (``rsjax.dual._certify`` has the
certificate and its proof).

* ``certify``: the estimator's CERTIFY, then the chosen sigma's classifier's; the radius is
  the smaller of the two at the union of their levels (``DualCertificate``).
* ``choose_offsets`` / ``shift_logits``: offsets of the estimator's logits chosen on
  held-out data (``rsjax.dual._calibrate``), baked into its output layer.
* ``rsjax.dual.paper``: the estimator trained the paper's way (soft radius targets, the
  consistency term, rebalancing, AdamW, sigma_g at least the largest candidate) and
  ``CandidateSigma``, one classifier trained for every candidate sigma.
* ``METHOD``: ``--method dual`` (the run's model is the estimator, ``--dual-experts`` the
  classifiers); its check derives each row again from its two sets of counts.

Names are imported on first use.
"""

from rsjax import _lazy

__getattr__, __dir__, __all__ = _lazy.exports(
  __name__,
  {
    "METHOD": "rsjax.dual.method",
    "parse_experts": "rsjax.dual.method",
    "Dual": "rsjax.dual._certify",
    "DualCertificate": "rsjax.dual._certify",
    "certify": "rsjax.dual._certify",
    "check_sigmas": "rsjax.dual._certify",
    "split_alpha": "rsjax.dual._certify",
    "certified": "rsjax.dual._calibrate",
    "choose_offsets": "rsjax.dual._calibrate",
    "estimator_logits": "rsjax.dual._calibrate",
    "predicted_radii": "rsjax.dual._calibrate",
    "predicted_radius": "rsjax.dual._calibrate",
    "shift_logits": "rsjax.dual._calibrate",
  },
)
