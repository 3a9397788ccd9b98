"""The one table of legal claims: which certificates rsjax certifies, and so which ``verify`` accepts.

A run's claim is the combination of what its certificate states: the method,
the noise (its family and the norm of the radius), the multiclass radius, the
budget rule of a budgeted run, the compute precision and the narrow-stage
packing. Some combinations have no sound certificate in rsjax (the multiclass
radius of Cohen et al.'s Theorem 1 holds for Gaussian noise only; the budgeted
rules give the binary radius). What each method certifies (its noises, a multiclass
radius, a budget rule) is part of its value (``rsjax.runs.method.Method``: ``noises``,
``multiclass``, ``budget``), so this table names no method. :func:`refusal` says, in one
line, why a claim is not legal; ``Method.build`` (certify, audit, the demo) and ``rsjax verify`` both call
it, so a record that ``certify`` would never write is refused by ``verify`` with
the same line, whoever wrote it.

NumPy and SciPy at most (the alpha rule is ``rsjax.stats``'): ``rsjax verify`` reads it
without JAX.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from rsjax.records.sampling import RunSampling
from rsjax.records.spec import NOISE_NORMS
from rsjax.stats import ALPHA_MAX, alpha_refusal

__all__ = [
  "ALPHA_MAX",
  "BUDGET_RULES",
  "GAUSSIAN",
  "NOISES",
  "PACKS",
  "PRECISIONS",
  "Claim",
  "alpha_refusal",
  "every_claim",
  "refusal",
]


#: The noises, by their ``--noise`` names (``rsjax.records.spec.NOISE_NORMS``).
NOISES = tuple(NOISE_NORMS)
#: Budget rules: None (fixed N), Cohen's looks with alpha spending, the anytime-valid rule.
BUDGET_RULES = (None, "looks", "anytime")
#: Compute precisions (``rsjax.engine.precision.PRECISIONS``, which imports JAX; a test checks they
#: agree).
PRECISIONS = ("float32", "tf32", "bfloat16")
#: Samples packed into a narrow stage's channels (``rsjax.models.pack_narrow_stage``; 1: off).
PACKS = (1, 2, 4)

#: The Gaussian noises: those of the multiclass radius (Cohen et al., Theorem 1, Gaussian L2),
#: and the ``noises`` of a method that certifies Gaussian noise only. The sound 8-bit noise is
#: not one (invalid draws count for no class, so they bound no runner-up).
GAUSSIAN = ("gaussian", "gaussian_fast")


class MethodClaims(Protocol):
  """What :func:`refusal` reads of a method (``rsjax.runs.method.Method``)."""

  @property
  def name(self) -> str: ...
  @property
  def noises(self) -> tuple[str, ...] | None: ...  # the noises it certifies; None: every noise
  @property
  def multiclass(self) -> bool: ...  # it gives the multiclass radius
  @property
  def budget(self) -> bool: ...  # it runs budgeted CERTIFY (a radius grid and a budget rule)


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
    sampling: RunSampling,
    options: Mapping[str, Any],
    multiclass: bool,
  ) -> Claim:
    """The claim of a run's fields (``rsjax.records.spec.RunSpec``: its sampling settings,
    the method's options)."""
    grid = options.get("grid")
    rule = None if grid is None else str(options.get("budget_rule") or "looks")
    return cls(
      method=str(method),
      noise=sampling.noise,
      multiclass=bool(multiclass),
      budget_rule=rule,
      precision=sampling.precision,
      pack=sampling.pack,
      alpha=sampling.alpha,
    )


def refusal(claim: Claim, method: MethodClaims) -> str | None:
  """Why ``claim`` (a run of ``method``) is not one rsjax certifies, in one line; None when
  it is legal.

  The rules are tried in the order ``rsjax certify`` meets them (an option of another
  method, alpha, then the method's plan), so both name the same first reason.
  """
  c, m = claim, method
  if c.budget_rule is not None and not m.budget:
    return f"method={m.name} has no budgeted CERTIFY (grid=...)"
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
  if c.multiclass and not m.multiclass:
    return f"method={m.name} gives the binary radius only, not multiclass=True"
  if c.multiclass and c.noise not in GAUSSIAN:
    return (
      "multiclass=True (Cohen et al.'s multiclass L2 radius) works with Gaussian noise only, "
      f"not noise={c.noise}"
    )
  if m.noises is not None and c.noise not in m.noises:
    only = "Gaussian noise only" if set(m.noises) == set(GAUSSIAN) else ", ".join(m.noises)
    return f"method={m.name} certifies with {only}, not noise={c.noise}"
  if c.budget_rule is not None and c.multiclass:
    return "grid=... (budgeted CERTIFY) works with the binary radius only"
  return None


def every_claim(methods: Iterable[str]) -> Iterator[Claim]:
  """Every combination of the table's fields for the methods named (for tests and
  documentation)."""
  for method, noise, multiclass, rule, precision, pack in itertools.product(
    methods, NOISES, (False, True), BUDGET_RULES, PRECISIONS, PACKS
  ):
    yield Claim(method, noise, multiclass, rule, precision, pack)
