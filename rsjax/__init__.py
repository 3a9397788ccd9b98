"""rsjax: randomized smoothing in JAX.

Sound, reproducible and fast Monte Carlo certification of neural networks
(Cohen et al. 2019 and the methods built on it). The core is three steps:
noise for an input (``rsjax.noise``), class counts on device
(``rsjax.sample_counts``), and a certificate on the host (``rsjax.stats``).
"""

from rsjax import noise as noise
from rsjax import precision as precision
from rsjax import stats as stats
from rsjax._certify import ABSTAIN as ABSTAIN
from rsjax._certify import Certificate as Certificate
from rsjax._certify import FixedN as FixedN
from rsjax._certify import Sampling as Sampling
from rsjax._certify import SamplingRule as SamplingRule
from rsjax._certify import certificate_from_counts as certificate_from_counts
from rsjax._certify import run_certify as run_certify
from rsjax._cohen import certify as certify
from rsjax._cohen import predict as predict
from rsjax._sampling import sample_counts as sample_counts
from rsjax._step import sample_noise as sample_noise
from rsjax.sigma import SigmaSource as SigmaSource
from rsjax.sigma import SigmaValues as SigmaValues

from rsjax._version import __version__ as __version__

# Method modules are imported on first use, so ``import rsjax`` stays light and
# the core never imports flax: ``rsjax.models``, ``rsjax.idrs``, ... just work.
_LAZY_MODULES = ("anisotropic", "audit", "budgeted", "checkpoint", "cli", "data", "ddrs", "denoise",
                 "deq", "demo", "distributed", "idrs", "io", "metrics", "models", "plots", "record",
                 "runner", "traced", "training", "verify")


def __getattr__(name):
  if name in _LAZY_MODULES:
    import importlib
    return importlib.import_module(f"rsjax.{name}")
  raise AttributeError(f"module 'rsjax' has no attribute {name!r}")

__all__ = [
    "ABSTAIN",
    "Certificate",
    "FixedN",
    "Sampling",
    "SamplingRule",
    "SigmaSource",
    "SigmaValues",
    "certificate_from_counts",
    "certify",
    "noise",
    "precision",
    "predict",
    "run_certify",
    "sample_counts",
    "sample_noise",
    "stats",
]
