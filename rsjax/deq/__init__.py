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
    "SRS": "rsjax.deq._certify",
    "StandardRS": "rsjax.deq._certify",
    "STANDARD_METHOD": "rsjax.deq.method",
    "SRS_METHOD": "rsjax.deq.method",
    "max_certifiable_radius": "rsjax.deq._budget",
    "min_check_samples": "rsjax.deq._budget",
    "mismatch_cap": "rsjax.deq._budget",
    "CORRECTIONS": "rsjax.deq._srs",
    "MODES": "rsjax.deq._certify",
    "SRSCertificate": "rsjax.deq._bound",
    "certify": "rsjax.deq._certify",
    "srs_certificate": "rsjax.deq._bound",
    "srs_p_lower": "rsjax.deq._bound",
    "CHECK_MODES": "rsjax.deq._srs",
    "SRSConfig": "rsjax.deq._srs",
    "SRSCounts": "rsjax.deq._srs",
    "SRSPlan": "rsjax.deq._srs",
    "check_indices": "rsjax.deq._srs",
    "make_srs_plan": "rsjax.deq._srs",
    "srs_sample": "rsjax.deq._srs",
  },
)
