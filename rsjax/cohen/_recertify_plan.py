"""``--method recertify`` (``rsjax.cohen.RECERTIFY``): the certifier of a child run
(``rsjax.cohen.Recertify``), built from its parent run's record, counts and model
(``rsjax recertify PARENT.tsv CHILD OUT.tsv``).

The parent run is read from the file its options name and must be the one they name (claim
digest, model fingerprint, the digest of its certificate record:
``rsjax.cohen._recertify_check.link_issues``); its model is loaded from the directory its
record names and must have its fingerprint. The parent's bounds are Cohen's certificate of
its recorded counts (``rsjax.engine.cohen_rule``); the child's rows are
``rsjax.cohen._recertify.Recertify``'s, on the child run's key.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rsjax.cohen._recertify_check import link_issues, parent_of
from rsjax.engine.driver import Sampling
from rsjax.records.spec import RunSpec
from rsjax.runs.method import Context

__all__ = ["load_parent", "load_votes", "recorded_counts"]


def recorded_counts(recs: dict, ids: np.ndarray, num_classes: int) -> tuple[np.ndarray, ...]:
  """``(counts0 [M, C], counts [M, C])``: a run's recorded selection and estimation counts of
  its rows ``ids`` (``recs``: ``rsjax.runs.record.read_records``'s)."""
  from rsjax.claims import dense

  c0 = np.stack([dense(recs[int(i)].get("counts0"), num_classes) for i in ids])
  return c0, np.stack([dense(recs[int(i)].get("counts"), num_classes) for i in ids])


def _parent_model(run: RunSpec, moved: str | None = None) -> tuple[Any, Any]:
  """``(apply_fn, params)`` of the parent run's model directory, as it certified it: the
  directory its record names (resolved against its result file's folder), or ``moved``
  (``rsjax audit --parent-model-dir``).

  Raises:
    ValueError: a parent not certified from a model directory, or another model there now.
  """
  from rsjax import models
  from rsjax.runs.runner import fingerprint

  m = run.model
  if m.source != "model_dir" or m.path is None or m.denoiser or m.resize:
    raise ValueError(
      "recertify needs a parent certified from a model directory, without a denoiser or --resize"
    )
  from rsjax.records.canonical import model_config_digest
  from rsjax.records.paths import resolve

  where = moved or resolve(m.path, run.out)
  try:
    model, config = models.load_model(where)
  except FileNotFoundError as e:
    raise ValueError(f"the parent's model {where!r} cannot be found: {e}") from None
  if model_config_digest(config) != m.config or config.get("model") != m.architecture:
    raise ValueError(  # the same weights built another way compute another function
      f"the model in {where!r} is not built as the parent run's (its configuration digest "
      "or architecture differ)"
    )
  pack = run.sampling.pack
  if pack != 1:
    model = models.pack_narrow_stage(model, pack)
  apply_fn, params = models.to_apply_fn(model)
  if fingerprint(params) != m.fingerprint:
    raise ValueError(f"the model in {where!r} is not the one the parent run certified")
  return apply_fn, params


def _same_classes(ctx: Context, parent: RunSpec) -> None:
  """Raises ``ValueError`` unless the child (the context's model) has the parent run's
  classes: the bound compares the two models' classes one by one."""
  import jax.numpy as jnp

  x = jnp.zeros((1, *tuple(ctx.dataset.input_shape)), jnp.float32)
  classes = int(ctx.apply_fn(ctx.params, x).shape[-1])
  if classes != parent.data.num_classes:
    raise ValueError(
      f"the child model has {classes} classes, its parent run {parent.data.num_classes}: "
      "a child recertifies a model of its parent's classes"
    )


def load_parent(
  ctx: Context,
  *,
  parent: str | None,
  parent_claim: str | None,
  parent_model: str | None,
  parent_records: str | None,
) -> tuple[RunSpec, tuple]:
  """The parent run a child run's options name, once it is the one they name, and the
  arguments of ``Parent.of``: its model and Cohen's certificate of its counts."""
  from rsjax.engine.cohen_rule import certificate_from_counts
  from rsjax.runs import record
  from rsjax.runs.record import noise_name

  options = {"parent": parent, "parent_claim": parent_claim, "parent_model": parent_model,
             "parent_records": parent_records}  # fmt: skip
  run = parent_of(options)
  why = link_issues(run, options, sigma=ctx.sigma, noise=noise_name(ctx.settings.noise),
                    multiclass=ctx.multiclass, dataset=ctx.dataset.name)  # fmt: skip
  if why:
    raise ValueError(why[0])
  _same_classes(ctx, run)
  apply_fn, params = _parent_model(run, ctx.files.get("parent_model"))
  settings = Sampling.from_record(run.sampling)
  recs = record.read_records(str(run.out))
  ids = np.asarray(sorted(recs), np.int64)
  c0, c1 = recorded_counts(recs, ids, run.data.num_classes)
  cert = certificate_from_counts(c0, c1, n=settings.n, alpha=settings.alpha,
                                 scale=np.full(len(ids), run.sigma),
                                 dim=int(np.prod(ctx.dataset.input_shape)),
                                 noise=settings.noise, multiclass=run.multiclass)  # fmt: skip
  return run, (cert, apply_fn, params, settings, ids)


def load_votes(run: RunSpec, parent: str, digest: str):
  """The stored votes of the parent run ``run`` (result file ``parent``) a replayed child's
  option ``replay`` names by their SHA-256 ``digest`` (``rsjax.cohen._recertify_replay``).

  Raises:
    ValueError: a multiclass parent, no votes file, or another file than the one named.
  """
  from rsjax.cohen._recertify_check import file_sha256, votes_path
  from rsjax.cohen._recertify_replay import ParentVotes, parent_key

  if run.multiclass:
    raise ValueError("a replayed child needs a binary parent (the votes test its class only)")
  path = votes_path(parent)
  try:
    got = file_sha256(path)
  except OSError:
    raise ValueError(f"the parent's votes {path!r} are missing: rsjax recertify --replay "
                     "stores them") from None  # fmt: skip
  if got != digest:
    raise ValueError(f"the parent's votes {path!r} are not the ones the child was certified from")
  return ParentVotes.read(path, parent_key(run))
