"""The one table of legal claims: which certificates rsjax certifies, and so which ``verify`` accepts.

A run's claim is the combination of what its certificate states: the method,
the noise (its family and the norm of the radius), the multiclass radius, the
budget rule of a budgeted run, the compute precision and the narrow-stage
packing. Some combinations have no sound certificate in rsjax (the multiclass
radius of Cohen et al.'s Theorem 1 holds for Gaussian noise only; the budgeted
rules give the binary radius; the per-input sigma of IDRS, DDRS and the DEQ
methods is Gaussian). :func:`refusal` says, in one line, why a claim is not
legal; ``Method.plan`` (certify, audit, the demo) and ``rsjax verify`` both call
it, so a record that ``certify`` would never write is refused by ``verify`` with
the same line, whoever wrote it.

NumPy and SciPy at most (the alpha rule is ``rsjax.stats``'): ``rsjax verify`` reads it
without JAX.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Mapping
from typing import Any

from rsjax.records.spec import NOISE_NORMS
from rsjax.stats import ALPHA_MAX, alpha_refusal

__all__ = [
  "ALPHA_MAX",
  "BUDGET_RULES",
  "METHODS",
  "NOISES",
  "PACKS",
  "PRECISIONS",
  "Claim",
  "alpha_refusal",
  "every_claim",
  "refusal",
]


#: The built-in methods (``rsjax.methods.METHODS``; a test checks they agree). A method
#: plugged in from outside meets the rules of every method (noise, multiclass, budget, alpha).
METHODS = ("cohen", "recertify", "idrs", "ucan", "ddrs", "deq-standard", "srs", "dual")
#: The noises, by their ``--noise`` names (``rsjax.records.spec.NOISE_NORMS``).
NOISES = tuple(NOISE_NORMS)
#: Budget rules: None (fixed N), Cohen's looks with alpha spending, the anytime-valid rule.
BUDGET_RULES = (None, "looks", "anytime")
#: Compute precisions (``rsjax.engine.precision.PRECISIONS``, which imports JAX; a test checks they
#: agree).
PRECISIONS = ("float32", "tf32", "bfloat16")
#: Samples packed into a narrow stage's channels (``rsjax.models.pack_narrow_stage``; 1: off).
PACKS = (1, 2, 4)

#: Noises whose multiclass radius (Cohen et al., Theorem 1, Gaussian L2) rsjax certifies: the
#: sound 8-bit noise is not one (invalid draws count for no class, so they bound no runner-up).
_MULTICLASS_NOISES = frozenset({"gaussian", "gaussian_fast"})
#: Methods certifying a per-input or DEQ sigma with Gaussian noise and the binary radius only.
_BINARY_GAUSSIAN = frozenset({"idrs", "ddrs", "deq-standard", "srs", "dual"})
#: Methods with a multiclass radius.
_MULTICLASS_METHODS = frozenset({"cohen", "ucan", "recertify"})


@dataclasses.dataclass(frozen=True)
class Claim:
  """What a run's certificate states, as far as its legality goes.

  Attributes:
    method: the ``--method`` name.
    noise: the ``--noise`` name.
    multiclass: the multiclass radius with simultaneous bounds.
    budget_rule: None (fixed N), ``"looks"`` or ``"anytime"`` (``--grid``).
    precision: the compute precision.
    pack: samples packed into a narrow stage (1: none).
    alpha: the failure probability of each row's bound.
  """

  method: str
  noise: str
  multiclass: bool = False
  budget_rule: str | None = None
  precision: str = "float32"
  pack: int = 1
  alpha: float = 0.001

  @classmethod
  def of_run(
    cls,
    *,
    method: str,
    sampling: Mapping[str, Any],
    options: Mapping[str, Any],
    multiclass: bool,
  ) -> Claim:
    """The claim of a run's fields (``rsjax.records.spec.RunSpec``: its sampling settings,
    the method's options)."""
    grid = options.get("grid")
    rule = None if grid is None else str(options.get("budget_rule") or "looks")
    return cls(
      method=str(method),
      noise=str(sampling.get("noise")),
      multiclass=bool(multiclass),
      budget_rule=rule,
      precision=str(sampling.get("precision") or "float32"),
      pack=sampling.get("pack", 1),
      alpha=sampling.get("alpha", 0.001),
    )


def refusal(claim: Claim) -> str | None:
  """Why ``claim`` is not one rsjax certifies, in one line; None when it is legal.

  The rules are tried in the order ``rsjax certify`` meets them (an option of another
  method, alpha, then the method's plan), so both name the same first reason.
  """
  c = claim
  if c.budget_rule is not None and c.method != "cohen":
    return f"--grid works with --method cohen, not {c.method}"
  why = alpha_refusal(c.alpha)
  if why is not None:
    return why
  if c.noise not in NOISES:
    return f"unknown noise {c.noise!r} (known: {', '.join(NOISES)})"
  if c.budget_rule not in BUDGET_RULES:
    return f"unknown budget rule {c.budget_rule!r} (known: looks, anytime)"
  if c.precision not in PRECISIONS:
    return f"unknown precision {c.precision!r} (known: {', '.join(PRECISIONS)})"
  if c.pack not in PACKS or isinstance(c.pack, bool):
    return f"pack must be one of {list(PACKS)}, got {c.pack!r}"
  if c.method in _BINARY_GAUSSIAN:
    if c.multiclass:
      return f"--multiclass works with --method cohen or ucan, not {c.method}"
    if c.noise not in _MULTICLASS_NOISES:
      return f"--method {c.method} certifies with Gaussian noise only, not --noise {c.noise}"
  if c.method == "recertify" and c.noise not in _MULTICLASS_NOISES:
    return f"--method recertify bounds Gaussian noise only, not --noise {c.noise}"
  if c.multiclass and c.noise not in _MULTICLASS_NOISES:
    return (
      "--multiclass (Cohen et al.'s multiclass L2 radius) works with Gaussian noise only, "
      f"not --noise {c.noise}"
    )
  if c.budget_rule is not None and c.multiclass:
    return "--grid (budgeted CERTIFY) works with --method cohen and the binary radius only"
  if c.method == "ucan" and c.noise == "gaussian_8bit":
    return (
      "--method ucan scales the noise per pixel; the sound 8-bit noise has one sigma for "
      "every pixel (--noise gaussian_8bit works with --method cohen)"
    )
  return None


def every_claim() -> Iterator[Claim]:
  """Every combination of the table's fields (for tests and documentation)."""
  for method, noise, multiclass, rule, precision, pack in itertools.product(
    METHODS, NOISES, (False, True), BUDGET_RULES, PRECISIONS, PACKS
  ):
    yield Claim(method, noise, multiclass, rule, precision, pack)
