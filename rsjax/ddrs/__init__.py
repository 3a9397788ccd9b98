"""DDRS: data-dependent smoothing (Alfarra, Bibi, Torr, Ghanem, UAI 2022).

A flat API over private modules:

* ``_sigma``: ``optimize_sigma`` (with a ``SigmaAscent`` config): per-input
  sigma by gradient ascent on the soft smoothed margin
  ``R(sigma) = sigma/2 * (Phi^-1(clip(psi_A)) - Phi^-1(clip(psi_B)))``
  (Algorithm 1), jit-compiled, all inputs in parallel; ``OptimizedSigma``, the
  sigma source (``rsjax.SigmaSource``: ``evaluate(x) -> SigmaValues``, rate inf).
* ``_memory``: ``MemoryCertifier``, the memory-based post-processing
  (Algorithm 3) that keeps certified balls of different classes disjoint over a
  deployment run.
* ``_certify``: ``certify`` (Cohen's CERTIFY at the optimized per-input sigma,
  then the memory; ``DDRSCertificate``) and ``certify_dataset`` (a resumable
  dataset run).

Soundness: a sigma chosen from x itself (as ``optimize_sigma`` does) changes the
smoothed classifier from input to input, so Cohen's radius at that sigma is NOT
a certificate of a fixed smoothed classifier (Súkeník et al., IDRS App. C;
``sound=False``). With a ``MemoryCertifier`` the result is the memory-based
guarantee of DDRS §3.5 (``sound=True``): it holds for this deployment run, in
this input order, only.
"""

from rsjax.ddrs._certify import MC_COLUMNS as MC_COLUMNS
from rsjax.ddrs._certify import MEMORY_COLUMNS as MEMORY_COLUMNS
from rsjax.ddrs._certify import DDRSCertificate as DDRSCertificate
from rsjax.ddrs._certify import certify as certify
from rsjax.ddrs._certify import certify_dataset as certify_dataset
from rsjax.ddrs._certify import memory_path as memory_path
from rsjax.ddrs._memory import MemoryCertifier as MemoryCertifier
from rsjax.ddrs._sigma import FAMILIES as FAMILIES
from rsjax.ddrs._sigma import PARAMETRIZATIONS as PARAMETRIZATIONS
from rsjax.ddrs._sigma import OptimizedSigma as OptimizedSigma
from rsjax.ddrs._sigma import SigmaAscent as SigmaAscent
from rsjax.ddrs._sigma import optimize_sigma as optimize_sigma
from rsjax.ddrs._sigma import sigma_ascent as sigma_ascent
from rsjax.ddrs._sigma import smoothing_objective as smoothing_objective

__all__ = [
    "DDRSCertificate",
    "FAMILIES",
    "MC_COLUMNS",
    "MEMORY_COLUMNS",
    "MemoryCertifier",
    "OptimizedSigma",
    "PARAMETRIZATIONS",
    "SigmaAscent",
    "certify",
    "certify_dataset",
    "memory_path",
    "optimize_sigma",
    "sigma_ascent",
    "smoothing_objective",
]
