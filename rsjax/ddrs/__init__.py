"""DDRS: data-dependent smoothing (Alfarra, Bibi, Torr, Ghanem, UAI 2022).

A flat API over private modules:

* ``_objective``: ``SigmaAscent`` (the ascent's settings) and
  ``smoothing_objective`` (a Monte-Carlo estimate of the margin R below).
* ``_sigma``: ``optimize_sigma`` (with a ``SigmaAscent`` config): per-input
  sigma by gradient ascent on the soft smoothed margin
  ``R(sigma) = sigma/2 * (Phi^-1(clip(psi_A)) - Phi^-1(clip(psi_B)))``
  (Algorithm 1), jit-compiled, all inputs in parallel; ``OptimizedSigma``, the
  sigma source (``rsjax.SigmaSource``: ``evaluate(x) -> SigmaValues``, rate inf).
* ``_memory``: ``MemoryCertifier``, the memory-based post-processing
  (Algorithm 3) that keeps certified balls of different classes disjoint over a
  deployment run.
* ``_certify``: ``certify`` (Cohen's CERTIFY at the optimized per-input sigma,
  then the memory; ``DDRSCertificate``). A resumable dataset run is the method
  ``METHOD`` (``--method ddrs``; ``rsjax.app.launch.run`` of a ``RunSpec`` naming it).

Soundness: a sigma chosen from x itself (as ``optimize_sigma`` does) changes the
smoothed classifier from input to input, so Cohen's radius at that sigma is NOT
a certificate of a fixed smoothed classifier (Súkeník et al., IDRS App. C;
``sound=False``). With a ``MemoryCertifier`` the result is the memory-based
guarantee of DDRS §3.5 (``sound=True``): it holds for this deployment run, in
this input order, only.
"""

from rsjax import _lazy

__getattr__, __dir__, __all__ = _lazy.exports(
  __name__,
  {
    "DDRS": "rsjax.ddrs._certify",
    "METHOD": "rsjax.ddrs.method",
    "DDRSCertificate": "rsjax.ddrs._certify",
    "certify": "rsjax.ddrs._certify",
    "MemoryCertifier": "rsjax.ddrs._memory",
    "FAMILIES": "rsjax.ddrs._objective",
    "PARAMETRIZATIONS": "rsjax.ddrs._objective",
    "OptimizedSigma": "rsjax.ddrs._sigma",
    "SigmaAscent": "rsjax.ddrs._objective",
    "optimize_sigma": "rsjax.ddrs._sigma",
    "sigma_ascent": "rsjax.ddrs._sigma",
    "smoothing_objective": "rsjax.ddrs._objective",
  },
)
