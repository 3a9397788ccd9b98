"""What a certify method is: its options, the context it gets, the plan it returns.

The declarations behind the registry ``rsjax.methods.METHODS`` (re-exported
there): an :class:`Option` of a method, the :class:`Context` every method
gets, the :class:`Plan` it builds, the :class:`Method` entry, and
:func:`restorer`, the resume hook of a plan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from rsjax.engine.driver import Sampling

__all__ = ["Context", "Method", "Option", "Plan", "restorer"]


@dataclasses.dataclass(frozen=True)
class Option:
  """One option of a method (the command's ``--name`` with ``_`` -> ``-``).

  Attributes:
    name: keyword of ``Method.build``.
    default: default value.
    help: one line for ``--help``.
    type: ``int``, ``float``, ``str`` or a ``str -> value`` converter that
      raises ``ValueError`` on bad text.
    choices: allowed values, or None.
    positive: the value must be > 0 (numbers).
  """

  name: str
  default: Any
  help: str
  type: Callable = str
  choices: tuple | None = None
  positive: bool = False


@dataclasses.dataclass(frozen=True)
class Context:
  """What every method gets: the trained model, the data and the common settings.

  Attributes:
    key: ``jax.random.key`` of the run (the noise of input ``i`` derives from it
      and ``i``; it is not consumed).
    model: the trained NNX model.
    apply_fn: its pure eval-mode ``apply_fn(params, x) -> logits``.
    params: variables of ``apply_fn``.
    dataset: the dataset certified (``num_classes``, ``input_shape``, ``name``).
    sigma: the noise level (float; by default the training sigma).
    sampling: the ``rsjax.Sampling`` of every certify call (``n0``, ``n``,
      ``alpha``, ``batch_size``, the noise family, ...).
    multiclass: the multiclass radius with simultaneous bounds.
    workdir: the training workdir (methods may read saved state from it), or None.
    load_split: ``load_split(split) -> Dataset`` of the same dataset (e.g. the
      training inputs of IDRS's kNN sigma).
  """

  key: jax.Array
  model: Any
  apply_fn: Callable
  params: Any
  dataset: Any
  sigma: float
  sampling: Sampling = Sampling()
  multiclass: bool = False
  workdir: str | None = None
  load_split: Callable | None = None


@dataclasses.dataclass(frozen=True)
class Plan:
  """A method ready to run on chunks of a dataset.

  Attributes:
    certify_fn: ``certify_fn(x [b, ...], ids [b]) -> Certificate``.
    columns: names of the extra result columns.
    row: ``row(cert, j) -> {column: value}`` for row ``j`` of one call.
    describe: one line on the settings (printed by the command).
    sequential: the chunks must run in the dataset's order in one process
      (a memory carries state from input to input).
    inputs_per_call: a good number of inputs per call, or None (the caller's default).
    restore: ``restore(x, predict, radius)`` replays rows already written
      (resume) into the method's state; None when it has none.
    record: ``record(cert, j) -> {field: JSON value}``: what row ``j``'s radius
      depends on beyond its counts (e.g. IDRS's sigma and slack), added to the
      row's certificate record (``rsjax.record``) for ``rsjax verify``; None
      when the counts and the run-wide settings are all.
    details: run-wide facts the radius depends on (JSON dict), kept as the
      ``"details"`` of the run's certificate record (``rsjax.record.header``).
  """

  certify_fn: Callable
  columns: tuple[str, ...] = ()
  row: Callable | None = None
  describe: str = ""
  sequential: bool = False
  restore: Callable | None = None
  inputs_per_call: int | None = None
  record: Callable | None = None
  details: dict | None = None


@dataclasses.dataclass(frozen=True)
class Method:
  """A registry entry.

  Attributes:
    name: the ``--method`` name.
    summary: one line for ``--help``.
    build: ``build(context, **options) -> Plan``; raises ``ValueError`` (one
      line) for settings it cannot run.
    options: its options (shared ``Option`` objects may appear in several methods).
  """

  name: str
  summary: str
  build: Callable[..., Plan]
  options: tuple[Option, ...] = ()

  def defaults(self) -> dict:
    """``{option: default}``."""
    return {o.name: o.default for o in self.options}

  def plan(self, context: Context, **options) -> Plan:
    """``build`` with the given options over the defaults.

    Raises:
      ValueError: an unknown option, or settings the method cannot run.
    """
    unknown = sorted(set(options) - {o.name for o in self.options})
    if unknown:
      raise ValueError(f"method {self.name!r} has no option {unknown}; its options: "
                       f"{sorted(self.defaults())}")
    return self.build(context, **{**self.defaults(), **options})


def restorer(plan: Plan, dataset) -> Callable | None:
  """The ``restore`` hook of ``rsjax.runner.certify_dataset`` for a plan (None if stateless).

  It replays the rows already in the result file (their inputs from
  ``dataset.get_batch``) into the plan's state, e.g. the DDRS memory.
  """
  if plan.restore is None:
    return None

  def restore(results) -> None:
    if len(results.idx):
      x, _ = dataset.get_batch(np.asarray(results.idx))
      plan.restore(np.asarray(x), np.asarray(results.predict), np.asarray(results.radius))

  return restore
