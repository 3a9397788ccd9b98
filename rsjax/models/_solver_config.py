"""What a fixed-point solve is: the solver's name, steps and tolerance (``SolverConfig``,
its "30A" label) and its result (``SolverResult``)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, NamedTuple

import jax

from rsjax.util import check_int

__all__ = ["SOLVERS", "SolverConfig", "SolverResult", "as_solver_config"]

#: The fixed-point solvers of DEQ models by name (``--deq-solver``).
SOLVERS = ("anderson", "iteration", "broyden")
_ALIASES = {
  "anderson": "anderson",
  "a": "anderson",
  "iteration": "iteration",
  "naive": "iteration",
  "n": "iteration",
  "fixed_point": "iteration",
  "picard": "iteration",
  "broyden": "broyden",
  "b": "broyden",
}
_LETTERS = {"anderson": "A", "iteration": "N", "broyden": "B"}
_LABEL = re.compile(r"^\s*(\d+)\s*([ANBanb])\s*$")


class SolverResult(NamedTuple):
  """Result of a fixed-point solve.

  Attributes:
    z: ``[B, ...]`` the solver's estimate of the fixed point.
    residual: ``[B]`` float32 relative residual ``||f(x) - x|| / (||f(x)|| + 1e-8)``
      at the last evaluated point ``x``.
    steps: int32 scalar, the number of evaluations of ``f`` that ran.
    converged: ``[B]`` bool, ``residual <= tol`` (all True when ``tol`` is None
      and the residual is finite).
  """

  z: jax.Array
  residual: jax.Array
  steps: jax.Array
  converged: jax.Array


@dataclasses.dataclass(frozen=True)
class SolverConfig:
  """Hyperparameters of a solver (hashable: usable as a static jit argument).

  Attributes:
    name: ``"anderson"``, ``"iteration"`` or ``"broyden"`` (aliases ``"naive"``,
      ``"A"``, ``"N"``, ``"B"``).
    steps: number of evaluations of ``f`` (>= 1).
    m: Anderson memory (history size, >= 1).
    lam: Anderson ridge regularization of the ``G G^T`` Gram matrix.
    beta: Anderson mixing (1 = use the mixed ``f`` values only).
    tol: optional relative residual tolerance.
    early_stop: with ``tol``, stop once every sample has ``residual <= tol``;
      otherwise run all ``steps`` and only report convergence.
  """

  name: str = "anderson"
  steps: int = 30
  m: int = 6
  lam: float = 1e-4
  beta: float = 1.0
  tol: float | None = None
  early_stop: bool = True

  def __post_init__(self) -> None:
    name = _ALIASES.get(str(self.name).lower())
    if name is None:
      raise ValueError(f"solver must be one of {SOLVERS} (or an alias), got {self.name!r}")
    object.__setattr__(self, "name", name)
    check_int("steps", self.steps)
    check_int("m (Anderson memory)", self.m)
    if not self.lam >= 0:
      raise ValueError(f"lam must be >= 0, got {self.lam!r}")
    if not 0 < self.beta <= 1:
      raise ValueError(f"beta must lie in (0, 1], got {self.beta!r}")
    if self.tol is not None and not self.tol > 0:
      raise ValueError(f"tol must be > 0 or None, got {self.tol!r}")

  def replace(self, **kw: Any) -> SolverConfig:
    return dataclasses.replace(self, **kw)

  @property
  def label(self) -> str:
    """The paper's name of this solver: ``"30A"``, ``"3B"``, ``"1N"``."""
    return f"{self.steps}{_LETTERS[self.name]}"


def as_solver_config(
  solver: SolverConfig | str, steps: int | None = None, **kw: Any
) -> SolverConfig:
  """Builds a ``SolverConfig`` from a name, a paper label or a config.

  Args:
    solver: a ``SolverConfig``, a solver name (``"anderson"``, ``"naive"``,
      ``"broyden"``, ...) or a label ``"kA"`` / ``"kN"`` / ``"kB"`` such as
      ``"30A"`` (then ``steps`` defaults to ``k``).
    steps: overrides the number of steps.
    **kw: other ``SolverConfig`` fields to override.

  Returns:
    The ``SolverConfig``.
  """
  if steps is not None:
    kw["steps"] = steps
  if isinstance(solver, SolverConfig):
    return solver.replace(**kw) if kw else solver
  if not isinstance(solver, str):
    raise ValueError(f"solver must be a name in {SOLVERS} or a SolverConfig, got {solver!r}")
  label = _LABEL.match(solver)
  if label:
    solver = label.group(2)
    kw.setdefault("steps", int(label.group(1)))  # unless given
  return SolverConfig(name=solver, **kw)
