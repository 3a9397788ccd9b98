"""Input-dependent randomized smoothing (IDRS; Súkeník, Kuvshinov, Günnemann, ICML 2022).

sigma(x) varies with the input; certificates need its semi-elasticity rate r
(``|log s(x) - log s(y)| <= r ||x - y||``) and the noncentral chi-square
radius of Theorem 3.2, which checks both sides (sigma1 below and above
sigma0). Layout:

* ``_xi``: the worst-case probabilities ``xi_greater`` / ``xi_less`` (host,
  ``scipy.stats.ncx2``, guarded: ``IDRSNumericalError`` instead of wrong numbers);
* ``_radius``: ``certified_radius`` (Thm 3.2), ``sigma_ratio_threshold``
  (Thm 2.4, Table 1), ``renyi_radius`` (Thm B.5);
* ``_design``: sigma(x) designs carrying their rate (``KnnSigma``, the paper's
  eq. (1) on device; ``ConstantSigma``; ``make_design`` for the CLI);
* ``_certify``: ``certify`` (sampling with per-input sigma through the core
  engine, Cohen's bounds, the IDRS radius).
"""

from rsjax.idrs._certify import IDRSCertificate as IDRSCertificate
from rsjax.idrs._certify import certify as certify
from rsjax.idrs._design import DEFAULT_M as DEFAULT_M
from rsjax.idrs._design import ConstantSigma as ConstantSigma
from rsjax.idrs._design import KnnSigma as KnnSigma
from rsjax.idrs._design import make_design as make_design
from rsjax.idrs._design import mean_knn_distance as mean_knn_distance
from rsjax.idrs._radius import THRESHOLD_PRESETS as THRESHOLD_PRESETS
from rsjax.idrs._radius import certified_radius as certified_radius
from rsjax.idrs._radius import is_certified as is_certified
from rsjax.idrs._radius import renyi_radius as renyi_radius
from rsjax.idrs._radius import sigma_ratio_threshold as sigma_ratio_threshold
from rsjax.idrs._radius import threshold_ratios as threshold_ratios
from rsjax.idrs._xi import MAX_DIM as MAX_DIM
from rsjax.idrs._xi import MAX_NONCENTRALITY as MAX_NONCENTRALITY
from rsjax.idrs._xi import IDRSNumericalError as IDRSNumericalError
from rsjax.idrs._xi import worst_case_ball as worst_case_ball
from rsjax.idrs._xi import xi as xi
from rsjax.idrs._xi import xi_greater as xi_greater
from rsjax.idrs._xi import xi_less as xi_less
from rsjax.idrs._xi import xi_side as xi_side
from rsjax.idrs._reference import ball_probability as ball_probability
from rsjax.sigma import SigmaValues as SigmaValues  # re-exported: defined in the core

__all__ = [
    "ConstantSigma",
    "DEFAULT_M",
    "IDRSCertificate",
    "IDRSNumericalError",
    "KnnSigma",
    "MAX_DIM",
    "MAX_NONCENTRALITY",
    "SigmaValues",
    "THRESHOLD_PRESETS",
    "certified_radius",
    "certify",
    "is_certified",
    "make_design",
    "mean_knn_distance",
    "renyi_radius",
    "sigma_ratio_threshold",
    "threshold_ratios",
    "worst_case_ball",
    "xi",
    "xi_greater",
    "xi_less",
    "xi_side",
    "ball_probability",
]
