"""Deep equilibrium models (DEQs) and serialized randomized smoothing (SRS).

Gao, Hou, Xu, Liu, "Certified Robustness for Deep Equilibrium Models via
Serialized Random Smoothing", NeurIPS 2024.

* ``solvers``: batched fixed-point solvers with a static step count
  (plain iteration, Anderson), per-sample residuals, warm starts.
* ``implicit``: implicit-gradient fixed point (custom VJP) and the Hutchinson
  Jacobian regularizer.
"""

from rsjax.deq.implicit import fixed_point as fixed_point
from rsjax.deq.implicit import jacobian_frobenius_sq as jacobian_frobenius_sq
from rsjax.deq.solvers import SolverConfig as SolverConfig
from rsjax.deq.solvers import SolverResult as SolverResult
from rsjax.deq.solvers import anderson as anderson
from rsjax.deq.solvers import fixed_point_iteration as fixed_point_iteration
from rsjax.deq.solvers import relative_residual as relative_residual
from rsjax.deq.solvers import solve as solve

__all__ = [
    "SolverConfig",
    "SolverResult",
    "anderson",
    "fixed_point",
    "fixed_point_iteration",
    "jacobian_frobenius_sq",
    "relative_residual",
    "solve",
]
