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

from rsjax import _lazy
from rsjax.noise.sigma import SigmaValues as SigmaValues  # re-exported: defined in the core

__getattr__, __dir__, __all__ = _lazy.exports(
  __name__,
  {
    "IDRS": "rsjax.idrs._certify",
    "METHOD": "rsjax.idrs.method",
    "IDRSCertificate": "rsjax.idrs._certify",
    "certify": "rsjax.idrs._certify",
    "DEFAULT_M": "rsjax.idrs._design",
    "ConstantSigma": "rsjax.idrs._design",
    "KnnSigma": "rsjax.idrs._design",
    "make_design": "rsjax.idrs._design",
    "mean_knn_distance": "rsjax.idrs._design",
    "THRESHOLD_PRESETS": "rsjax.idrs._radius",
    "certified_radius": "rsjax.idrs._radius",
    "is_certified": "rsjax.idrs._radius",
    "renyi_radius": "rsjax.idrs._radius",
    "sigma_ratio_threshold": "rsjax.idrs._radius",
    "threshold_ratios": "rsjax.idrs._radius",
    "MAX_DIM": "rsjax.idrs._xi",
    "MAX_NONCENTRALITY": "rsjax.idrs._xi",
    "IDRSNumericalError": "rsjax.idrs._xi",
    "worst_case_ball": "rsjax.idrs._xi",
    "xi": "rsjax.idrs._xi",
    "xi_greater": "rsjax.idrs._xi",
    "xi_less": "rsjax.idrs._xi",
    "xi_side": "rsjax.idrs._xi",
    "ball_probability": "rsjax.idrs._reference",
  },
)
