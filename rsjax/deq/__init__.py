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
* ``_certify``: ``certify`` (standard RS or SRS), ``SRSCertificate`` and the
  two-stage correlation-eliminated certificate.
"""

from rsjax.deq._budget import max_certifiable_radius as max_certifiable_radius
from rsjax.deq._budget import min_check_samples as min_check_samples
from rsjax.deq._budget import mismatch_cap as mismatch_cap
from rsjax.deq._certify import CORRECTIONS as CORRECTIONS
from rsjax.deq._certify import METHODS as METHODS
from rsjax.deq._certify import SRSCertificate as SRSCertificate
from rsjax.deq._certify import certify as certify
from rsjax.deq._certify import srs_certificate as srs_certificate
from rsjax.deq._certify import srs_p_lower as srs_p_lower
from rsjax.deq._srs import CHECK_MODES as CHECK_MODES
from rsjax.deq._srs import SRSConfig as SRSConfig
from rsjax.deq._srs import SRSCounts as SRSCounts
from rsjax.deq._srs import SRSPlan as SRSPlan
from rsjax.deq._srs import check_indices as check_indices
from rsjax.deq._srs import make_srs_plan as make_srs_plan
from rsjax.deq._srs import srs_sample as srs_sample

__all__ = [
    "CHECK_MODES",
    "CORRECTIONS",
    "METHODS",
    "SRSCertificate",
    "SRSConfig",
    "SRSCounts",
    "SRSPlan",
    "certify",
    "check_indices",
    "make_srs_plan",
    "max_certifiable_radius",
    "min_check_samples",
    "mismatch_cap",
    "srs_certificate",
    "srs_p_lower",
    "srs_sample",
]
