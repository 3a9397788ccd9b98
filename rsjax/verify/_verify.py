"""``rsjax verify``: recompute every prediction and radius of a certify run from its counts.

A certify run keeps its run record (``<file>.run.json``, the one value of the
run: ``rsjax.records.spec.RunSpec``) and the counts of each row in
``<file>.cert.jsonl`` (``rsjax.runs.record``). :func:`verify` recomputes, for every
row of the TSV, the bound, the prediction and the radius from the recorded
counts with NumPy and SciPy only (no model, no JAX, no device), by the formulas
written out again here (not by calling the code that produced them), and
reports each row where they differ from the file, or where the record itself is
inconsistent (counts that do not sum to N0 / N, a row without a record, a
``correct`` column that does not follow from ``predict`` and ``label``, a
budgeted run's looks or alpha levels, a budgeted row that stopped before N where
its counts there do not meet its rule's stopping test: the engine's own decision,
``rsjax.claims.looks_decision`` and ``anytime_stop``). The rows must be exactly the run's
declared indices (a missing row leaves the run incomplete, a row outside them
is a mismatch), and whenever the run's dataset can be loaded (the embedded
ones always) every label and input fingerprint is checked against it; the
report says what could not be checked. What verify and audit prove, and under
which threat model: ``docs/VERIFY.md``.

Methods: ``cohen`` and ``deq-standard`` (binary radius of Gaussian / Laplace /
uniform noise, the multiclass radius with simultaneous bounds, and budgeted
runs with their alpha spending), ``idrs`` (Thm 3.2 checked at the radius),
``ucan`` (frozen (mu, sigma)), ``srs`` (the two-stage bound), ``ddrs``
(Cohen's radius at each row's recorded sigma, then the memory step replayed in
the file's order from the inputs), ``recertify`` (a child's rows from its parent's
counts and its disagreement counts), ``dual`` (the estimator's and the chosen
expert's counts), ``patch`` (the exact votes of every band or block, the patch rule with its
tie to the smaller class) and ``ablation`` (Cohen's counts, the L0 radius).

Tolerances: predictions and counts are compared exactly; bounds and radii to a
relative ``rtol`` (default 1e-9) plus ``atol`` 1e-12 (both sides are float64
from the same SciPy special functions, so they agree to the last bits in
practice).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from rsjax import methods
from rsjax.claims import Claim, Mismatch, VerifyError, refusal
from rsjax.records import io
from rsjax.runs import record as record_lib
from rsjax.runs.method import Method
from rsjax.verify._columns import check_generic, non_numeric, unverified_columns
from rsjax.verify._report import VerifyReport
from rsjax.verify._run import (
  NOT_BOUND,
  UNBOUND,
  certificate_view,
  check_against_dataset,
  check_claim_digest,
  check_noise_table,
  check_rows_declared,
  claim_line,
  images_words,
  load_dataset,
  option_refusal,
  split_issue,
)

if TYPE_CHECKING:
  from rsjax.data import Dataset
  from rsjax.records.spec import RunSpec

__all__ = ["Mismatch", "VerifyError", "VerifyReport", "read_run", "verifiable", "verify"]


def verifiable() -> dict[str, Method]:
  """``{name: method}`` of the registered methods whose radius verify derives again
  (``rsjax.methods.available()`` with a ``check``)."""
  return {m.name: m for m in methods.available() if m.check is not None}


def read_run(path: str | os.PathLike[str]) -> RunSpec:
  """The run of a certify result file (``rsjax.records.spec.RunSpec``).

  Raises:
    VerifyError: no such file, no readable run record, or not a certify run.
  """
  from rsjax.records.spec import RunFormatError, RunSpec

  p = os.fspath(path)
  if not os.path.exists(p):
    raise VerifyError(f"{p!r} does not exist")
  try:
    run = RunSpec.read(p)
  except RunFormatError as e:
    raise VerifyError(str(e)) from None
  if run.command != "certify":
    raise VerifyError(f"{p!r} is a {run.command!r} run: only certify runs carry certificates")
  return run


def verify(
  path: str | os.PathLike[str],
  *,
  rtol: float = 1e-9,
  atol: float = 1e-12,
  inputs: Callable[[np.ndarray], np.ndarray] | None = None,
  data_dir: str | None = None,
  dataset: Dataset | None = None,
  accept_unbound: bool = False,
  parent: str | os.PathLike[str] | None = None,
) -> VerifyReport:
  """Recomputes every prediction and radius of a certify result file from its record.

  Args:
    path: a certify result file with its run record (``rsjax.records.spec.RunSpec``)
      and certificate record (``rsjax certify``, or
      ``rsjax.runs.runner.certify_dataset(..., run=spec, record=True)``).
    rtol: relative tolerance of the radii and bounds.
    atol: absolute tolerance of the radii and bounds.
    inputs: ``inputs(idx [b]) -> x [b, *input_shape]``, the inputs of dataset
      indices, for the one method that needs them (``ddrs``'s memory); by
      default the run's dataset.
    data_dir: TFDS ``data_dir`` of the run's dataset, if it needs one.
    dataset: the run's dataset split, already loaded (``rsjax audit`` has it);
      by default it is loaded by the run's name and split.
    accept_unbound: verify an ``rsjax-run/2`` record, whose key does not bind its
      claim. Off by default: any ``rsjax-run/3`` run can be rewritten as one with the
      same key (its claim digest moved into ``key.fold_in``), after which alpha, the
      multiclass radius and the declared range could be chosen after the draw.
    parent: a recertified run's parent result file, where a reader moved it (default: the
      one its record names, resolved against the result file's folder).

  Returns:
    A :class:`VerifyReport`; ``report.ok`` when the run is complete and every
    row matches. ``report.unchecked`` says what could not be checked here.

  Raises:
    VerifyError: the file has no readable run record, was not a certify run,
      or has a method whose radius cannot be recomputed from counts.
    ValueError: the file is not a certify file (``rsjax.records.io``; a duplicated idx).
  """
  p = os.fspath(path)
  run = read_run(p)
  method = _method_of(p, run)
  located = _located(p, run, method, parent)
  res = io.read_certify(p)
  if (why := non_numeric(res, method.columns)) is not None:
    raise VerifyError(f"{p!r} {why}")
  recs = record_lib.read_records(p)
  issues, missing = check_rows_declared(run, res)
  issues.extend(check_noise_table(run))
  issues.extend(check_claim_digest(run))
  issues.extend(_order_issues(method, run, res))
  unchecked = []
  if not run.claim_bound:
    if not accept_unbound:
      issues.append(Mismatch(-1, NOT_BOUND))
    unchecked.append(UNBOUND)
  if (why := split_issue(run)) is not None:
    issues.append(Mismatch(-1, why))
  ds, why = (dataset, None) if dataset is not None else load_dataset(run, data_dir)
  if ds is None:
    unchecked.append(f"labels and inputs against the dataset ({why})")
  else:
    issues.extend(check_against_dataset(run, res, recs, ds))
    if inputs is None:
      inputs = lambda idx: np.asarray(ds.get_batch(np.asarray(idx, np.int64))[0])  # noqa: E731
  assert method.check is not None  # verifiable() holds only methods with a check
  try:  # a record's details the method cannot read are a refusal, not a traceback
    view = certificate_view(located)
    issues.extend(method.check(view, res, recs, rtol=rtol, atol=atol, inputs=inputs))
  except (KeyError, TypeError, AttributeError, IndexError) as e:
    raise VerifyError(
      f"{p}: the run's method.details are not what {run.method} records ({type(e).__name__}: {e})"
    ) from None
  issues.extend(_parent_issues(method, located, data_dir))
  issues.extend(check_generic(res, recs, n_max=run.sampling.n, num_classes=run.data.num_classes))
  unchecked.extend(view["unchecked"])
  issues.extend(_correct_column_issues(res))
  issues.extend(_extra_record_issues(res, recs))
  return VerifyReport(
    p,
    run.method,
    len(res),
    tuple(issues),
    declared=len(run.indices()),
    missing=missing,
    unchecked=tuple(unchecked),
    data=None if ds is None else (images_words(run, ds) or _data_words(run)),
    claim=claim_line(run, method.claim_words),
    unverified=unverified_columns(res, method.columns),
  )


def _data_words(run: RunSpec) -> str:
  """The inputs a report says the labels and inputs are those of."""
  if run.data.file_sha256 is None:
    return f"{run.data.name} {run.data.split}"
  return (
    f"the array file {run.data.name} (SHA-256 {run.data.file_sha256[:16]}), supplied with "
    "the run: which inputs it holds is its author's choice"
  )


def _method_of(p: str, run: RunSpec) -> Method:
  """The registered method of the run in the file ``p``, whose check verifies it.

  Raises:
    VerifyError: no registered method verifies it, or its claim is one certify refuses.
  """
  table = verifiable()
  if run.method not in table:
    raise VerifyError(
      f"{p!r}: method {run.method!r} cannot be verified from counts by this "
      f"rsjax (verifiable: {', '.join(sorted(table))})"
    )
  method = table[run.method]
  refused = refusal(
    Claim.of_run(
      method=run.method, sampling=run.sampling, options=run.options, multiclass=run.multiclass
    ),
    method,
  )
  if refused is None:
    refused = option_refusal(method, run.options)
  if refused is not None:  # the line certify refuses the same claim with
    raise VerifyError(f"{p!r}: {refused}")
  return method


def _located(
  p: str, run: RunSpec, method: Method, parent: str | os.PathLike[str] | None
) -> RunSpec:
  """The run with the files its options name resolved against the result file's folder
  (``rsjax.records.paths``), the parent where ``parent`` says; refuses a parent run that is
  not there (it cannot be verified from here: exit 2, not a failure)."""
  import dataclasses

  from rsjax.records.paths import locator

  moved = {"parent": None if parent is None else os.fspath(parent)}
  options = method.located(run.options, locator(p, moved))
  named = options.get("parent")
  if named and not os.path.exists(str(named)):
    raise VerifyError(
      f"{p!r}: its parent run {run.options.get('parent')!r} is not at {str(named)!r}: "
      "give it with --parent FILE"
    )
  return dataclasses.replace(run, options=options)


def _parent_issues(method: Method, run: RunSpec, data_dir: str | None) -> list[Mismatch]:
  """A run certified from a parent run (an option ``parent``: ``--method recertify``) holds
  only if its parent verifies too: one mismatch when it does not."""
  parent = run.options.get("parent")
  if "parent" not in {o.name for o in method.options} or not parent:
    return []
  try:
    if read_run(str(parent)).options.get("parent"):  # a chain (or a circle) of parents
      return [Mismatch(-1, f"the parent run {parent!r} is itself certified from a parent")]
    report = verify(str(parent), data_dir=data_dir)
  except (VerifyError, ValueError) as e:
    return [Mismatch(-1, f"the parent run {parent!r} cannot be verified: {e}")]
  if report.ok:
    return []
  return [Mismatch(-1, f"the parent run {parent!r} does not verify: {report.summary()}")]


def _order_issues(method: Method, run: RunSpec, res: io.CertifyResults) -> list[Mismatch]:
  """The rows out of the run's order (increasing idx), for a method with a memory."""
  if method.ordered and np.any(np.diff(np.asarray(res.idx, np.int64)) <= 0):
    # A memory depends on the order the run processed its inputs: the declared order.
    return [
      Mismatch(
        -1,
        f"the rows are not in the run's order (increasing idx), which "
        f"{run.method}'s memory depends on",
      )
    ]
  return []


def _correct_column_issues(res: io.CertifyResults) -> list[Mismatch]:
  """The rows whose ``correct`` column does not follow from ``predict`` and ``label``."""
  return [
    Mismatch(
      int(res.idx[j]),
      f"correct {int(res.correct[j])} but predict {res.predict[j]}, label {res.label[j]}",
    )
    for j in np.flatnonzero(res.correct != (res.predict == res.label))
  ]


def _extra_record_issues(res: io.CertifyResults, recs: dict[int, dict]) -> list[Mismatch]:
  """One mismatch when the certificate record holds rows that are not in the file."""
  extra = sorted(set(recs) - {int(i) for i in res.idx})
  if extra:
    return [
      Mismatch(
        -1,
        f"the record holds {len(extra)} rows that are not in the file (first idx "
        f"{extra[0]}): a truncated or edited file?",
      )
    ]
  return []
