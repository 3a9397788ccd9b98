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

from rsjax import _lazy

__getattr__, __dir__ = _lazy.exports(__name__, {
    "SRS": "rsjax.deq._certify",
    "StandardRS": "rsjax.deq._certify",
    "STANDARD_METHOD": "rsjax.deq.method",
    "SRS_METHOD": "rsjax.deq.method",
    "max_certifiable_radius": "rsjax.deq._budget",
    "min_check_samples": "rsjax.deq._budget",
    "mismatch_cap": "rsjax.deq._budget",
    "CORRECTIONS": "rsjax.deq._certify",
    "MODES": "rsjax.deq._certify",
    "SRSCertificate": "rsjax.deq._certify",
    "certify": "rsjax.deq._certify",
    "srs_certificate": "rsjax.deq._certify",
    "srs_p_lower": "rsjax.deq._certify",
    "implicit_fixed_point": "rsjax.deq._implicit",
    "jacobian_frobenius_sq": "rsjax.deq._implicit",
    "DEQApply": "rsjax.deq._model",
    "DEQCell": "rsjax.deq._model",
    "DEQClassifier": "rsjax.deq._model",
    "DEQForward": "rsjax.deq._model",
    "DEQModel": "rsjax.deq._model",
    "make_apply_fn": "rsjax.deq._model",
    "to_deq_fn": "rsjax.deq._model",
    "MDEQCell": "rsjax.deq._mdeq",
    "MDEQClassifier": "rsjax.deq._mdeq",
    "SOLVERS": "rsjax.deq._solvers",
    "SolverConfig": "rsjax.deq._solvers",
    "SolverResult": "rsjax.deq._solvers",
    "anderson": "rsjax.deq._solvers",
    "broyden": "rsjax.deq._solvers",
    "as_solver_config": "rsjax.deq._solvers",
    "fixed_point_iteration": "rsjax.deq._solvers",
    "relative_residual": "rsjax.deq._solvers",
    "solve": "rsjax.deq._solvers",
    "CHECK_MODES": "rsjax.deq._srs",
    "SRSConfig": "rsjax.deq._srs",
    "SRSCounts": "rsjax.deq._srs",
    "SRSPlan": "rsjax.deq._srs",
    "check_indices": "rsjax.deq._srs",
    "make_srs_plan": "rsjax.deq._srs",
    "srs_sample": "rsjax.deq._srs",
})

__all__ = [
    "SRS",
    "StandardRS",
    "SRS_METHOD",
    "STANDARD_METHOD",
    "CHECK_MODES",
    "CORRECTIONS",
    "DEQApply",
    "DEQCell",
    "DEQClassifier",
    "DEQForward",
    "DEQModel",
    "MDEQCell",
    "MDEQClassifier",
    "MODES",
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
