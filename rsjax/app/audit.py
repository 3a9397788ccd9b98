"""``rsjax audit``: check a certify run against its model and its data.

:func:`verify <rsjax.verify.verify>` checks that the radii follow from the
recorded counts, that the run is complete and, where the dataset can be
loaded, that labels and inputs are the dataset's; it cannot tell whether the
counts are the model's. An audit, given the model, checks that they are:

1. **verify** on the whole file, against the run's dataset as the audit loads it (by its
   recorded name and split, never another): every row, completeness, bounds, the dataset's
   input shape, classes and size, and every row's label and input fingerprint.
2. **The model.** The fingerprint of the given model's parameters equals the run's, and so
   does the digest of the configuration it is built from (``rsjax.records.canonical.
   model_config_digest``: architecture, classes, input shape, ``model_kwargs``).
3. **The method.** The method's run-wide facts rebuilt from the run's settings and model
   (``rsjax.runs.method.Certifier.details``: UCAN's scales, a budgeted run's schedule,
   IDRS's design, SRS's checks) equal the recorded ones.
4. **Drawn rows.** ``rows`` of the run's declared indices are drawn with a
   fresh random seed (printed, so the audit can be repeated with ``seed=``; a
   forger cannot know which rows will be drawn). For each: the row is in the
   file and its selection and estimation counts drawn again -- from the run's
   one record (``rsjax.records.spec.RunSpec``: the same value ``verify`` checked,
   with its key derivation, method, options and precision) -- equal the
   recorded counts exactly. rsjax's counts are a function of key, input index,
   model and settings, so on the same platform and precision an honest run has
   no false alarm; a method's own float facts (DDRS's and IDRS's sigma(x)) are
   compared to :data:`FLOAT_RTOL`.

Detection power: a run with ``k`` forged rows among ``M`` declared ones escapes ``r`` drawn
rows with probability ``C(M - k, r) / C(M, r)`` (:func:`escape_probability`), stated in the
summary; ``rows="all"`` draws every row. Any forgery of what the counts are drawn with (sigma,
noise, method and its options, input shape, key, precision) changes every row's counts, so one
drawn row catches it. Settings that change only the bound (alpha, the multiclass radius, the
declared range) are part of the claim whose digest the run's key folds in (``rsjax-run/3``), so
editing them after the draw changes every row's counts too. An ``rsjax-run/2`` record, whose
key binds no claim, fails the audit (its ``verify`` check). The seed is the run's choice: a run
certified again with other seeds and the best one kept is not detected.

No statistical test of the noise: it would test the auditor's own noise generator, not the
run's (never stored), so it cannot see a forger's noise; re-drawing the counts does.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import secrets

import numpy as np

from rsjax import verify as verify_lib
from rsjax.app import launch
from rsjax.records.limits import json_int
from rsjax.records.spec import RunSpec
from rsjax.runs import record as record_lib

__all__ = ["AuditError", "AuditReport", "Check", "FLOAT_RTOL", "audit", "escape_probability"]


class AuditError(ValueError):
  """A run cannot be audited (no record, not a certify run, no model, ...)."""


@dataclasses.dataclass(frozen=True)
class Check:
  """One check of an audit.

  Attributes:
    name: what was checked.
    ok: whether it passed.
    detail: one line (the numbers).
  """

  name: str
  ok: bool
  detail: str

  def __str__(self) -> str:
    return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {self.detail}"


def escape_probability(declared: int, drawn: int, forged: int) -> float:
  """The chance that ``forged`` rows among ``declared`` all escape ``drawn`` rows drawn
  without replacement: ``C(declared - forged, drawn) / C(declared, drawn)``."""
  if forged <= 0:
    return 1.0
  if drawn > declared - forged:
    return 0.0
  return math.comb(declared - forged, drawn) / math.comb(declared, drawn)


@dataclasses.dataclass(frozen=True)
class AuditReport:
  """What :func:`audit` found.

  Attributes:
    path: the result file.
    rows: the dataset indices drawn.
    checks: every check, in order.
    seed: the seed of the choice of rows (repeat the audit with it).
    declared: the run's declared rows.
  """

  path: str
  rows: tuple[int, ...]
  checks: tuple[Check, ...]
  seed: int
  declared: int

  @property
  def ok(self) -> bool:
    return all(c.ok for c in self.checks)

  @property
  def reason(self) -> str:
    """The first failed check in one line ("" when the run passes)."""
    for c in self.checks:
      if not c.ok:
        return f"{c.name}: {c.detail}"
    return ""

  def power(self) -> str:
    """The detection power of the drawn rows, in words."""
    m, r = self.declared, len(self.rows)
    if r >= m:
      return f"every one of the {m} rows was drawn: any forged row is caught"
    k99 = next(k for k in range(1, m + 1) if escape_probability(m, r, k) <= 0.01)
    return (
      f"{r} of {m} rows drawn: one forged row escapes with probability "
      f"{escape_probability(m, r, 1):.3f}, {k99} or more forged rows with at most 0.01"
    )

  def summary(self) -> str:
    if self.ok:
      said = "".join(f"; {c.detail}" for c in self.checks if c.name.startswith("data "))
      return (
        f"audit passed: {self.path}, {len(self.rows)} rows re-drawn with identical counts "
        f"(seed {self.seed}); {self.power()}{said}"
      )
    return f"audit FAILED: {self.path}: {self.reason} (seed {self.seed})"


#: Relative tolerance of a method's own float record fields drawn again (DDRS's and
#: IDRS's sigma): 4 float32 ulps. The per-input sigma of DDRS comes from a batched ascent,
#: so on the run's platform it may move by an ulp when the rows are drawn again in other
#: batches than the run's; counts compare exactly. A looser tolerance (the golden contract's
#: 1e-5 across JAX versions) let a record state every sigma, and so every radius, that much
#: higher than drawn and pass (found by the red team); another platform may need an audit
#: there, as its counts may differ too.
FLOAT_RTOL = 4 * 2.0**-23


def _choose(run: RunSpec, rows, seed: int) -> np.ndarray:
  declared = np.asarray(run.indices(), np.int64)
  if rows == "all" or int(rows) >= len(declared):
    return declared
  rng = np.random.default_rng(seed)
  return np.sort(rng.choice(declared, size=int(rows), replace=False))


def audit(
  path: str | os.PathLike,
  *,
  model_dir: str | os.PathLike | None = None,
  rows: int | str = 20,
  seed: int | None = None,
  data_dir: str | os.PathLike | None = None,
  torch_checkpoint: str | os.PathLike | None = None,
  denoiser: str | os.PathLike | None = None,
  batch_size: int = 1000,
  parent_model_dir: str | os.PathLike | None = None,
  experts_dir: str | os.PathLike | None = None,
  parent: str | os.PathLike | None = None,
) -> AuditReport:
  """Audits a certify run with its model (module docstring).

  Args:
    path: the certify result file (with its ``.run.json`` and ``.cert.jsonl``).
    model_dir: the model directory the run certified.
    rows: how many of the run's declared rows to draw again, or ``"all"``.
    seed: seed of the choice of rows; None (default) draws a fresh one, which
      the report states.
    data_dir: TFDS ``data_dir`` of the dataset, if it needs one.
    torch_checkpoint: the PyTorch checkpoint the run certified, instead of
      ``model_dir``.
    denoiser: the denoiser directory of a denoised run (default: the recorded one).
    batch_size: forward passes per step (speed only; an SRS run's chains are its own).
    parent_model_dir: a recertified run's parent model: its parent run (the file the run
      names) is audited too, with the same rows and seed, as one more check (``parent``),
      and the child's disagreement counts are drawn again with it.
    experts_dir: the folder a Dual RS run's experts were moved to (each looked up by its
      folder's name; default: where the record names them, relative to the result file).
    parent: a recertified run's parent result file, where it was moved (default: the one
      the record names, relative to the result file).

  Returns:
    An :class:`AuditReport`.

  Raises:
    AuditError: the run cannot be audited (no run record, not a certify run,
      no model, ...).
  """
  p = os.fspath(path)
  if rows != "all" and (not isinstance(rows, int) or rows < 1):
    raise AuditError(f"rows must be >= 1 or 'all', got {rows!r}")
  run = _read_run(p)
  if run.options.get("parent") and parent_model_dir is None:
    raise AuditError(
      "a recertified run holds only if its parent does: give the parent's model too "
      "(--parent-model-dir DIR), whose run is then audited with the same rows"
    )
  seed = secrets.randbits(63) if seed is None else int(seed)
  declared = len(run.indices())
  moved = {"experts_dir": experts_dir, "parent": parent, "parent_model": parent_model_dir}
  files = _files(p, run, **moved)
  try:
    loaded = launch.load(
      run,
      model_dir=model_dir,
      torch_checkpoint=torch_checkpoint,
      denoiser=denoiser,
      data_dir=data_dir,
    )
  except launch.MismatchError as e:  # the model is there, the run does not fit it: failed
    checks = [_verify_check(p, data_dir, None, files), Check("model", False, f"{e}: not the run's")]
    return AuditReport(p, (), tuple(checks), seed, declared)
  except launch.RunError as e:  # nothing to audit against: failed if verify refuses the run
    verified = _verify_check(p, data_dir, None, files)
    if verified.ok:
      raise AuditError(str(e)) from None
    return AuditReport(p, (), (verified,), seed, declared)
  checks = [_verify_check(p, data_dir, loaded.dataset, files), _model_check(run, loaded)]
  if run.data.file_sha256 is not None:  # the inputs came with the run: the file's, bound
    checks.append(_data_file_check(run))
  if run.data.images_sha256 is not None:  # read from a folder: its images, named and bound
    checks.append(Check("data folder", *launch.loading.folder_check(run, loaded.dataset)))
  chosen = _choose(run, rows, seed)
  checks.extend(_drawn_checks(p, run, loaded, chosen, batch_size, data_dir, files))
  if parent_model_dir is not None:
    checks.append(_parent_check(run, files, rows, seed, data_dir, batch_size))
  return AuditReport(p, tuple(int(i) for i in chosen), tuple(checks), seed, declared)


def _files(p: str, run: RunSpec, **moved) -> dict[str, str]:
  """Where the files the run names are (``rsjax.records.paths.find``); one that is not there
  is an :class:`AuditError` (cannot audit, not a failure)."""
  from rsjax import methods
  from rsjax.records import paths

  try:
    return paths.find(methods.get(run.method).located, run.options, p, moved)
  except (KeyError, FileNotFoundError) as e:
    raise AuditError(str(e).strip("'\"")) from None


def _parent_check(run: RunSpec, files: dict, rows, seed: int, data_dir, batch_size: int) -> Check:
  """The audit of a recertified run's parent (the run it names) with its model, as a check;
  of a replayed child, the parent's stored votes of the audited rows drawn again too."""
  parent = files.get("parent")
  if not run.options.get("parent") or not parent:
    raise AuditError("--parent-model-dir: the run names no parent run (not recertified)")
  report = audit(str(parent), model_dir=files["parent_model"], rows=rows, seed=seed,
                 data_dir=data_dir, batch_size=batch_size)  # fmt: skip
  ok, detail = report.ok, f"{parent}: {report.summary()}"
  if ok and run.options.get("replay") is not None:
    from rsjax.app.parent_votes import votes_again

    ok, detail = votes_again(RunSpec.read(str(parent)), str(parent), files["parent_model"],
                             report.rows, data_dir, batch_size, detail)  # fmt: skip
  return Check("parent", ok, detail)


def _data_file_check(run: RunSpec) -> Check:
  """Whether the array file the audit loaded is the one the run certified (its SHA-256)."""
  have = launch.loading.file_sha256(run.data.name)
  ok = have == run.data.file_sha256
  why = (
    f"the inputs are the array file {run.data.name} the run supplied (SHA-256 {have[:16]}): "
    "bound, but chosen by the run's author, not a dataset a reviewer loads by name"
    if ok
    else f"the array file {run.data.name} (SHA-256 {str(have)[:16]}) is not the run's "
    f"({str(run.data.file_sha256)[:16]})"
  )
  return Check("data file", ok, why)


def _read_run(p: str) -> RunSpec:
  """The run record of the result file ``p``, its refusal an :class:`AuditError`."""
  try:
    return verify_lib.read_run(p)
  except verify_lib.VerifyError as e:
    raise AuditError(str(e)) from None


def _verify_check(p: str, data_dir: str | os.PathLike | None, ds, files: dict) -> Check:
  """``verify`` of the whole file: every row, its label and input against ``ds``, the
  dataset the audit loaded (a refusal an :class:`AuditError`)."""
  try:
    report = verify_lib.verify(p, data_dir=data_dir, dataset=ds, parent=files.get("parent"))
  except verify_lib.VerifyError as e:
    raise AuditError(str(e)) from None
  return Check("verify", report.ok, report.summary())


def _model_check(run: RunSpec, loaded: launch.Loaded) -> Check:
  """Whether the model given is the run's: the fingerprint of its parameters and, where the
  run recorded it, the digest of the configuration it was built from (its static constants,
  e.g. a normalization, are not parameters)."""
  from rsjax.records.canonical import model_config_digest
  from rsjax.runs import runner

  fp = runner.fingerprint(loaded.params)
  if fp != run.model.fingerprint:
    why = f"the model's parameters (fingerprint {fp}) are not the run's "
    return Check("model", False, why + f"({run.model.fingerprint}): another checkpoint")
  config = model_config_digest(loaded.config)
  if run.model.config is None:
    why = (
      "the run records no configuration digest of its model (model.config), so no model "
      "directory can be shown to be the run's (the same parameters may be built another way)"
    )
    return Check("model", False, why)
  named = launch.architecture_of(loaded.config, torch=run.model.source == "torch_checkpoint")
  if run.model.architecture != named:
    why = f"the run names the architecture {run.model.architecture!r}, the model is {named!r}"
    return Check("model", False, why)
  if config != run.model.config:
    why = (
      f"the model's configuration (digest {config[:16]}) is not the run's "
      f"({run.model.config[:16]}): the same parameters built another way "
      "(config.json's model, num_classes, input_shape or model_kwargs differ)"
    )
    return Check("model", False, why)
  if loaded.denoiser_config != run.model.denoiser_config:
    why = (
      f"the denoiser's settings (digest {str(loaded.denoiser_config)[:16]}) are not the run's "
      f"({str(run.model.denoiser_config)[:16]}): the same weights with another schedule, "
      "clipping, timestep or architecture setting"
    )
    return Check("model", False, why)
  if run.model.denoiser is None:
    return Check("model", True, f"fingerprint {fp}")
  why = (
    f"fingerprint {fp}, denoiser settings {loaded.denoiser_config[:16]} (the denoiser given, "
    "or the one the run names: the run's author's; pass --denoiser to audit against your copy)"
  )
  return Check("model", True, why)


def _drawn_checks(
  p: str,
  run: RunSpec,
  loaded: launch.Loaded,
  chosen: np.ndarray,
  batch_size: int,
  data_dir: str | os.PathLike | None,
  files: dict[str, str],
) -> list[Check]:
  """The checks of the ``chosen`` rows (``[r]`` dataset indices): the dataset, the method's
  run-wide facts rebuilt and, when they are the run's, the counts drawn again; each stops
  at its first failure."""
  from rsjax import methods
  from rsjax.verify._run import check_dataset_shape

  ds = loaded.dataset
  if check_dataset_shape(run, ds):  # nothing can be drawn again from another dataset
    why = f"{run.data.name} {run.data.split} is not the dataset the run declares (see verify)"
    return [Check("data", False, why)]
  recs = record_lib.read_records(p)
  x = np.asarray(ds.get_batch(chosen)[0])
  try:
    entry = methods.get(run.method).batch_detail  # a batch that changes counts: the run's
    if entry is not None:
      batch_size = json_int((run.details or {}).get(entry), f"method.details.{entry}", 1, 2**31)
    ctx, certifier = launch.plan(run, loaded, batch_size=batch_size, data_dir=data_dir, files=files)
    details = certifier.details(ctx)
  except Exception as e:  # noqa: BLE001 -- any record the model cannot rebuild: failed
    why = str(e) if isinstance(e, launch.RunError) else f"{type(e).__name__}: {e}"
    return [Check("method", False, f"the run cannot be rebuilt from its record: {why}")]
  method = _method_check(run, details)
  if not method.ok:
    return [method]
  return [method, _redraw(run, ctx, certifier, chosen, x, recs)]


def _method_check(run: RunSpec, details) -> Check:
  """Whether a certifier's run-wide facts (``details``) are the ones the run records."""
  rebuilt = _as_recorded(run, details)
  same = _same_tree(rebuilt, run.details)
  return Check(
    "method",
    same,
    "the method's run-wide facts (details) are those of the run's settings and model"
    if same
    else f"the run records details {run.details}, its settings and model give {rebuilt}",
  )


def _as_recorded(run: RunSpec, details):
  """Run-wide facts of a plan as the run record would hold them (JSON values)."""
  rec = dataclasses.replace(run, details=details).to_json()
  return json.loads(json.dumps(rec["method"].get("details")))


def _same_tree(a, b, rtol: float = 1e-9) -> bool:
  """JSON values equal, floats to a relative ``rtol``."""
  if isinstance(a, dict) and isinstance(b, dict):
    return a.keys() == b.keys() and all(_same_tree(a[k], b[k], rtol) for k in a)
  if isinstance(a, list) and isinstance(b, list):
    return len(a) == len(b) and all(_same_tree(u, v, rtol) for u, v in zip(a, b, strict=True))
  if isinstance(a, float) or isinstance(b, float):
    return (
      isinstance(a, (int, float))
      and isinstance(b, (int, float))
      and math.isclose(a, b, rel_tol=rtol, abs_tol=0.0)
    )
  return a == b and type(a) is type(b)


def _redraw(run, ctx, certifier, chosen, x, recs) -> Check:
  """Draws the counts of the chosen rows again from the run's record and compares them."""
  from rsjax.runs import runner

  n = run.sampling.n
  per_call = certifier.inputs_per_call or runner.default_inputs_per_call(n)
  differ = []
  for s in range(0, len(chosen), per_call):
    ids = chosen[s : s + per_call]
    c = runner.certify_inputs(ctx, certifier, x[s : s + per_call], ids)
    for j, i in enumerate(ids):
      own = c.record_fields(j)
      # As the record holds them (JSON values), to compare like with like.
      again = json.loads(json.dumps({**record_lib.row(c, j, x[s + j], n=n), **own}))
      r = recs.get(int(i))
      if r is None:  # a declared row the file lacks (verify reports it too)
        differ.append((int(i), "record", "no row", "its counts"))
        continue
      for field in ("counts0", "counts", "n", *sorted(own)):
        if not _same_tree(again[field], r.get(field), FLOAT_RTOL):
          differ.append((int(i), field, r.get(field), again[field]))
          break
  if differ:
    i, field, was, now = differ[0]
    what = {"counts0": "selection counts", "counts": "estimation counts", "n": "samples"}.get(
      field, field
    )
    why = f"{len(differ)} of {len(chosen)} rows drawn again give other counts "
    return Check("counts", False, why + f"(first idx {i}: {what} {was} recorded, {now} drawn)")
  return Check("counts", True, f"{len(chosen)} rows drawn again give the recorded counts exactly")
