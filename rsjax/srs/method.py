"""``--method srs`` and ``--method deq-standard`` as values (no JAX here: ``rsjax verify``
reads them). Both certify a DEQ model (Gao et al., NeurIPS 2024): ``deq-standard`` solves
every sample from scratch (Cohen's CERTIFY), ``srs`` warm-starts chains of samples and
certifies with the two-stage correlation-eliminated bound."""

from __future__ import annotations

from rsjax.claims import GAUSSIAN
from rsjax.cohen._check import check_cohen
from rsjax.runs.method import Method, Option
from rsjax.srs._check import check_srs

__all__ = ["SRS_METHOD", "STANDARD_METHOD"]

#: Fixed-point solvers (``rsjax.srs.SOLVERS``; aliases such as ``naive`` and ``A`` accepted).
_SOLVER_CHOICES = ("anderson", "iteration", "broyden")


def _solver_name(text: str) -> str:
  """A solver name or alias (``naive``, ``A``, ...) -> its registry name."""
  from rsjax.models import SolverConfig

  return SolverConfig(name=text).name


_DEQ_OPTIONS = (
  Option(
    "deq_solver",
    "anderson",
    "DEQ fixed-point solver (naive: plain iteration)",
    _solver_name,
    choices=_SOLVER_CHOICES,
  ),
  Option(
    "deq_steps",
    None,
    "solver steps per sample (default: 30 for deq-standard, 3 for srs)",
    int,
    positive=True,
  ),
)
_SRS_OPTIONS = (
  Option("deq_warmup_steps", 10, "SRS: steps on the first chunk of each chain", int, positive=True),
  # The chains' solvers only set where each chain starts: the certified classifier is the
  # check samples' (srs_check_steps from scratch), so any solver here keeps the bound sound.
  Option(
    "deq_warmup_solver",
    "anderson",
    "SRS: solver of the first chunk of each chain",
    _solver_name,
    choices=_SOLVER_CHOICES,
  ),
  Option("srs_m", 400, "SRS: check samples re-solved from scratch", int, positive=True),
  Option(
    "srs_check_steps",
    30,
    "SRS: solver steps of the check samples (the certified classifier)",
    int,
    positive=True,
  ),
  Option(
    "srs_correction",
    "paper",
    "SRS: correction of the bound (the paper's, or the authors' code)",
    str,
    choices=("paper", "authors_code"),
  ),
)


# Cohen's CERTIFY of the DEQ solved from scratch: Cohen's check.
#: ``--method deq-standard``: a DEQ certified with every sample solved from scratch.
STANDARD_METHOD = Method(
  "deq-standard",
  "a DEQ model, every sample solved from scratch",
  "rsjax.srs._certify:StandardRS",
  _DEQ_OPTIONS,
  check=check_cohen,
  noises=GAUSSIAN,
  timed_batch=False,
)
#: ``--method srs``: serialized randomized smoothing of a DEQ (Gao et al.).
SRS_METHOD = Method(
  "srs",
  "a DEQ model, serialized randomized smoothing (Gao et al.)",
  "rsjax.srs._certify:SRS",
  _DEQ_OPTIONS + _SRS_OPTIONS,
  check=check_srs,
  noises=GAUSSIAN,
  timed_batch=False,
  batch_detail="chains",
)
