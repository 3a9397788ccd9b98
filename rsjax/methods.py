"""Certify methods by name: the registry shared by the library and the ``rsjax`` command.

A :class:`Method` says how to certify a dataset with a trained model: its
options (name, default, help; the command turns each into a ``--flag``), and a
``build(context, **options) -> Plan`` that returns the per-chunk certify
function, the extra result columns and how to fill them. Adding a method is one
entry in :data:`METHODS`::

  method = rsjax.methods.METHODS["ucan"]
  plan = method.plan(context, ucan_pattern="l1")   # the other options at their defaults
  runner.certify_dataset(plan.certify_fn, ds.get_batch, indices, "out.tsv",
                         extra_columns=plan.columns, extra_fn=plan.row,
                         restore=rsjax.methods.restorer(plan, ds))

Every entry states what its radius guarantees (``Certificate.guarantee``) and
writes a ``sound`` column (1: a certificate; 0: numbers reported for comparison
only) when the method can produce results that are not certificates.
"""

from __future__ import annotations

import numpy as np

from rsjax._method import Context, Method, Option, Plan, restorer
from rsjax._plans import (UNIVERSAL_NOISE_FILE, cohen_plan, ddrs_plan, deq_plan, idrs_plan,
                          load_universal_noise, save_universal_noise, ucan_plan)
from rsjax.models import SOLVERS, SolverConfig

__all__ = ["Context", "METHODS", "Method", "Option", "Plan", "UNIVERSAL_NOISE_FILE",
           "load_universal_noise", "parse_grid", "restorer", "save_universal_noise"]


def parse_grid(text: str) -> tuple[float, ...]:
  """A radius grid ``"0,0.25,0.5"`` -> ascending radii >= 0 (``--grid``)."""
  try:
    radii = tuple(float(v) for v in text.split(","))
  except ValueError:
    raise ValueError(f"expected comma-separated radii, got {text!r}") from None
  if not all(np.isfinite(r) and r >= 0 for r in radii) or any(
      b <= a for a, b in zip(radii, radii[1:])):
    raise ValueError(f"radii must be >= 0 and strictly increasing, got {text}")
  return radii


def _solver_name(text: str) -> str:
  """A solver name or alias (``naive``, ``A``, ...) -> its registry name."""
  return SolverConfig(name=text).name


_DEQ_OPTIONS = (
    Option("deq_solver", "anderson", "DEQ fixed-point solver (naive: plain iteration)",
           _solver_name, choices=SOLVERS),
    Option("deq_steps", None, "solver steps per sample (default: 30 for deq-standard, 3 for srs)",
           int, positive=True),
)
_SRS_OPTIONS = (
    Option("deq_warmup_steps", 10, "SRS: steps on the first chunk of each chain", int,
           positive=True),
    Option("srs_m", 400, "SRS: check samples re-solved from scratch", int, positive=True),
    Option("srs_check_steps", 30, "SRS: solver steps of the check samples (the certified "
           "classifier)", int, positive=True),
    Option("srs_correction", "paper", "SRS: correction of the bound (the paper's, or the "
           "authors' code)", str, choices=("paper", "authors_code")),
)


def _deq_standard(ctx: Context, **options) -> Plan:
  return deq_plan(ctx, "standard", **{o.name: o.default for o in _SRS_OPTIONS}, **options)


def _srs(ctx: Context, **options) -> Plan:
  return deq_plan(ctx, "srs", **options)


# ----------------------------------------------------------------------------- registry


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("cohen", "Cohen et al.'s CERTIFY (Gaussian, Laplace or uniform noise)", cohen_plan, (
        Option("grid", None, "budgeted CERTIFY for this radius grid (e.g. 0,0.25,0.5,0.75): "
               "stop each input once its certified grid radius is decided, at most --N "
               "samples; adds a 'samples' column", parse_grid),
    )),
    Method("idrs", "input-dependent sigma(x) with the sound IDRS certificate", idrs_plan, (
        Option("idrs_rate", 0.01, "IDRS semi-elasticity r", float),
        Option("idrs_k", 20, "IDRS nearest neighbours k", int, positive=True),
        Option("idrs_m", None, "IDRS offset m (default by dataset: 1.5 for MNIST, 5 for "
               "CIFAR-10)", float),
    )),
    Method("ucan", "anisotropic (mu, sigma) noise, UCAN's certified region (pattern-wise or "
           "dataset-wise sigma)", ucan_plan, (
               Option("ucan_sigma", "auto", "dataset: the workdir's saved "
                      f"universal {UNIVERSAL_NOISE_FILE}; pattern: --sigma times the pattern; auto: "
                      "dataset if saved, else pattern", str, choices=("auto", "pattern",
                                                                      "dataset")),
               Option("ucan_pattern", "l2", "norm p of the pattern kappa ||(a, b)||_p^2 + iota",
                      str, choices=("l1", "l2", "linf")),
               Option("ucan_kappa", 0.2, "pattern curvature kappa", float),
               Option("ucan_iota", 0.8, "pattern value iota at the centre", float,
                      positive=True),
           )),
    Method("ddrs", "data-dependent sigma optimized per input, then the memory-based "
           "certification (DDRS)", ddrs_plan, (
               Option("ddrs_steps", 100, "sigma ascent steps per input", int),
               Option("ddrs_lr", 1e-4, "sigma ascent step size", float),
               Option("ddrs_draws", 1, "noise draws per ascent step", int, positive=True),
               Option("ddrs_memory", "on", "off: no memory, the radius is NOT a certificate",
                      str, choices=("on", "off")),
           )),
    Method("deq-standard", "a DEQ model, every sample solved from scratch", _deq_standard,
           _DEQ_OPTIONS),
    Method("srs", "a DEQ model, serialized randomized smoothing (Gao et al.)", _srs,
           _DEQ_OPTIONS + _SRS_OPTIONS),
)}
