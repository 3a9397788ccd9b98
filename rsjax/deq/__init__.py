"""Deep equilibrium models (DEQs) and serialized randomized smoothing (SRS).

Gao, Hou, Xu, Liu, "Certified Robustness for Deep Equilibrium Models via
Serialized Random Smoothing", NeurIPS 2024.

* ``solvers``: batched fixed-point solvers with a static step count
  (plain iteration, Anderson), per-sample residuals, warm starts.
* ``implicit``: implicit-gradient fixed point (custom VJP) and the Hutchinson
  Jacobian regularizer.
* ``model``: a single-scale convolutional DEQ classifier in Flax NNX and its
  pure functions (``DEQForward`` with warm starts, ``DEQApply`` for the core
  engine).
* ``srs``: serialized sampling (warm-started chains in a ``lax.scan``) with
  check samples.
* ``certify``: ``certify_deq`` (standard RS or SRS) and the two-stage
  correlation-eliminated certificate.
"""

from rsjax.deq.certify import CORRECTIONS as CORRECTIONS
from rsjax.deq.certify import METHODS as METHODS
from rsjax.deq.certify import SRSCertificate as SRSCertificate
from rsjax.deq.certify import certify_deq as certify_deq
from rsjax.deq.certify import srs_certificate as srs_certificate
from rsjax.deq.certify import srs_p_lower as srs_p_lower
from rsjax.deq.implicit import fixed_point as fixed_point
from rsjax.deq.implicit import jacobian_frobenius_sq as jacobian_frobenius_sq
from rsjax.deq.model import DEQApply as DEQApply
from rsjax.deq.model import DEQCell as DEQCell
from rsjax.deq.model import DEQClassifier as DEQClassifier
from rsjax.deq.model import DEQForward as DEQForward
from rsjax.deq.model import make_apply_fn as make_apply_fn
from rsjax.deq.model import to_deq_fn as to_deq_fn
from rsjax.deq.solvers import SolverConfig as SolverConfig
from rsjax.deq.solvers import SolverResult as SolverResult
from rsjax.deq.solvers import anderson as anderson
from rsjax.deq.solvers import fixed_point_iteration as fixed_point_iteration
from rsjax.deq.solvers import relative_residual as relative_residual
from rsjax.deq.solvers import solve as solve
from rsjax.deq.srs import SRSCounts as SRSCounts
from rsjax.deq.srs import srs_sample as srs_sample

__all__ = [
    "CORRECTIONS",
    "DEQApply",
    "DEQCell",
    "DEQClassifier",
    "DEQForward",
    "METHODS",
    "SRSCertificate",
    "SRSCounts",
    "SolverConfig",
    "SolverResult",
    "anderson",
    "certify_deq",
    "fixed_point",
    "fixed_point_iteration",
    "jacobian_frobenius_sq",
    "make_apply_fn",
    "relative_residual",
    "solve",
    "srs_certificate",
    "srs_p_lower",
    "srs_sample",
    "to_deq_fn",
]
