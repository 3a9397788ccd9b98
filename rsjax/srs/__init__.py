"""Serialized randomized smoothing (SRS) of deep equilibrium models (DEQs).

Gao, Hou, Xu, Liu, "Certified Robustness for Deep Equilibrium Models via
Serialized Random Smoothing", NeurIPS 2024.

The DEQ models and their fixed-point solvers are ``rsjax.models`` (``DEQClassifier``,
``MDEQClassifier``, ``SolverConfig``, ``solve``, ...). A flat API over private modules:

* ``_srs``: serialized sampling (``srs_sample``: warm-started chains in a
  ``lax.scan``) with check samples.
* ``_budget``: the mismatch budget (``max_certifiable_radius``,
  ``min_check_samples``, ``mismatch_cap``): the largest radius SRS can certify
  with ``N`` samples and ``m`` check samples, and the ``m`` a radius needs.
* ``_bound``: the two-stage correlation-eliminated certificate
  (``srs_p_lower``, ``srs_certificate``, ``SRSCertificate``).
* ``_certify``: ``certify`` (standard RS or SRS) and the certifiers ``SRS``
  and ``StandardRS``.
"""

from rsjax import _lazy

__getattr__, __dir__, __all__ = _lazy.exports(
  __name__,
  {
    "SRS": "rsjax.srs._certify",
    "StandardRS": "rsjax.srs._certify",
    "STANDARD_METHOD": "rsjax.srs.method",
    "SRS_METHOD": "rsjax.srs.method",
    "max_certifiable_radius": "rsjax.srs._budget",
    "min_check_samples": "rsjax.srs._budget",
    "mismatch_cap": "rsjax.srs._budget",
    "CORRECTIONS": "rsjax.srs._srs",
    "MODES": "rsjax.srs._certify",
    "SRSCertificate": "rsjax.srs._bound",
    "certify": "rsjax.srs._certify",
    "srs_certificate": "rsjax.srs._bound",
    "srs_p_lower": "rsjax.srs._bound",
    "CHECK_MODES": "rsjax.srs._srs",
    "SRSConfig": "rsjax.srs._srs",
    "SRSCounts": "rsjax.srs._srs",
    "SRSPlan": "rsjax.srs._srs",
    "check_indices": "rsjax.srs._srs",
    "make_srs_plan": "rsjax.srs._srs",
    "srs_sample": "rsjax.srs._srs",
  },
)
