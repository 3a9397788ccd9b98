"""Deep equilibrium models (DEQs) and serialized randomized smoothing (SRS).

Gao, Hou, Xu, Liu, "Certified Robustness for Deep Equilibrium Models via
Serialized Random Smoothing", NeurIPS 2024.

A flat API over private modules:

* ``_solvers``: batched fixed-point solvers with a static step count
  (``fixed_point_iteration``, ``anderson``, ``broyden``; ``solve`` with a
  ``SolverConfig`` or a paper label such as ``"30A"``, ``"3B"``, ``"1N"``),
  per-sample residuals, warm starts.
* ``_implicit``: ``implicit_fixed_point`` (the fixed point with an implicit
  gradient, custom VJP) and the Hutchinson Jacobian regularizer.
* ``_model``: a single-scale convolutional DEQ classifier in Flax NNX and its
  pure functions (``DEQForward`` with warm starts, ``DEQApply`` for the core
  engine).
* ``_mdeq``: a two-resolution MDEQ-style classifier (``MDEQClassifier``) on
  the same ``DEQModel`` base (training diagnostics, Jacobian regularizer).
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
from rsjax.deq._implicit import implicit_fixed_point as implicit_fixed_point
from rsjax.deq._implicit import jacobian_frobenius_sq as jacobian_frobenius_sq
from rsjax.deq._model import DEQApply as DEQApply
from rsjax.deq._model import DEQCell as DEQCell
from rsjax.deq._model import DEQClassifier as DEQClassifier
from rsjax.deq._model import DEQForward as DEQForward
from rsjax.deq._model import DEQModel as DEQModel
from rsjax.deq._model import make_apply_fn as make_apply_fn
from rsjax.deq._model import to_deq_fn as to_deq_fn
from rsjax.deq._mdeq import MDEQCell as MDEQCell
from rsjax.deq._mdeq import MDEQClassifier as MDEQClassifier
from rsjax.deq._solvers import SOLVERS as SOLVERS
from rsjax.deq._solvers import SolverConfig as SolverConfig
from rsjax.deq._solvers import SolverResult as SolverResult
from rsjax.deq._solvers import anderson as anderson
from rsjax.deq._solvers import broyden as broyden
from rsjax.deq._solvers import as_solver_config as as_solver_config
from rsjax.deq._solvers import fixed_point_iteration as fixed_point_iteration
from rsjax.deq._solvers import relative_residual as relative_residual
from rsjax.deq._solvers import solve as solve
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
    "DEQApply",
    "DEQCell",
    "DEQClassifier",
    "DEQForward",
    "DEQModel",
    "MDEQCell",
    "MDEQClassifier",
    "METHODS",
    "SOLVERS",
    "SRSCertificate",
    "SRSConfig",
    "SRSCounts",
    "SRSPlan",
    "SolverConfig",
    "SolverResult",
    "anderson",
    "as_solver_config",
    "broyden",
    "certify",
    "check_indices",
    "fixed_point_iteration",
    "implicit_fixed_point",
    "jacobian_frobenius_sq",
    "make_apply_fn",
    "make_srs_plan",
    "max_certifiable_radius",
    "min_check_samples",
    "mismatch_cap",
    "relative_residual",
    "solve",
    "srs_certificate",
    "srs_p_lower",
    "srs_sample",
    "to_deq_fn",
]
