"""rsjax: randomized smoothing in JAX.

Sound, reproducible and fast Monte Carlo certification of neural networks
(Cohen et al. 2019 and the methods built on it). The core is three steps:
noise for an input (``rsjax.noise``), class counts on device
(``rsjax.sample_counts``), and a certificate on the host (``rsjax.stats``).
"""

# Everything is imported on first use, so ``import rsjax`` stays light: the core
# never imports flax, and ``rsjax.verify`` / ``rsjax.records.spec`` (NumPy and SciPy
# only) never import JAX. ``rsjax.certify``, ``rsjax.models``, ... just work. The
# face hands on the library below it (docs/ARCHITECTURE.md, layer 8), not the
# applications above: ``import rsjax.training`` and ``rsjax.app`` (launch, demo, audit,
# bench, cli) name theirs.
_LAZY_NAMES = {
  "ABSTAIN": "engine.driver",
  "Certificate": "engine.driver",
  "FixedN": "engine.driver",
  "Sampling": "engine.driver",
  "SamplingRule": "engine.driver",
  "certificate_from_counts": "engine.cohen_rule",
  "run_certify": "engine.driver",
  "certify": "cohen._certify",
  "Cohen": "cohen._certify",
  "predict": "cohen._certify",
  "recertify": "cohen._recertify",
  "sample_counts": "engine.counts",
  "sample_noise": "engine.step",
  "SigmaSource": "noise.sigma",
  "SigmaValues": "noise.sigma",
  "Budget": "engine.budget",
  "Anytime": "engine.anytime",
}
_LAZY_MODULES = (
  "cohen",
  "data",
  "ddrs",
  "engine",
  "idrs",
  "methods",
  "metrics",
  "models",
  "noise",
  "runs",
  "srs",
  "stats",
  "ucan",
  "verify",
)


def __getattr__(name):
  import importlib

  if name == "__version__":
    value = _installed_version()
  elif name in _LAZY_NAMES:
    value = getattr(importlib.import_module(f"rsjax.{_LAZY_NAMES[name]}"), name)
  elif name in _LAZY_MODULES:
    value = importlib.import_module(f"rsjax.{name}")
  else:
    raise AttributeError(f"module 'rsjax' has no attribute {name!r}")
  globals()[name] = value  # the next access is a plain attribute lookup
  return value


def _installed_version() -> str:
  """The installed distribution's version (``pyproject.toml`` is its one place)."""
  import importlib.metadata as md

  try:
    return md.version("rsjax")
  except md.PackageNotFoundError:
    return "0+unknown"


def __dir__():
  return sorted(set(globals()) | set(_LAZY_NAMES) | set(_LAZY_MODULES) | {"__version__"})


#: The submodules ``from rsjax import *`` hands on beside the names: the core's three steps.
_CORE_MODULES = ("noise", "stats")

__all__ = sorted([*_LAZY_NAMES, *_CORE_MODULES])
