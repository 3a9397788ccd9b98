"""The parent's votes of a replayed child (``rsjax recertify --replay``), drawn from the
parent's model: stored once beside the parent's result file, and drawn again by ``rsjax audit
CHILD --parent-model-dir DIR`` for the audited rows (``rsjax.cohen._recertify_replay``)."""

from __future__ import annotations

import numpy as np

from rsjax.app import launch
from rsjax.records.spec import RunSpec

__all__ = ["draw_votes", "store_votes", "votes_again"]


def draw_votes(parent: RunSpec, path: str, ids=None, *, model_dir=None, data_dir=None,
               batch=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
  """``(ids [M], classes [M], votes [M, N] bool)``: the parent run's votes drawn again from
  its model (``model_dir``, default the directory its record names) for the rows ``ids``
  (default: every row of its record, ``path``).

  Raises:
    ValueError: the votes do not add up to the parent's recorded counts (another model or
      platform than the parent's).
  """
  from rsjax.cohen._recertify_plan import recorded_counts
  from rsjax.cohen._recertify_replay import parent_key, sample_votes
  from rsjax.engine.counts import prepare_inputs
  from rsjax.records.paths import resolve
  from rsjax.runs import record

  if model_dir is None and parent.model.path:
    model_dir = resolve(parent.model.path, path)
  loaded = launch.load(parent, model_dir=model_dir, data_dir=data_dir)
  recs = record.read_records(path)
  ids = np.asarray(sorted(recs) if ids is None else ids, np.int64)
  c = parent.data.num_classes
  c0, c1 = recorded_counts(recs, ids, c)
  classes = c0.argmax(axis=1)
  x, sig, ids_arr = prepare_inputs(np.asarray(loaded.dataset.get_batch(ids)[0]), parent.sigma, ids)
  settings = launch.settings(parent, batch_size=batch or 1000)
  votes = sample_votes(parent_key(parent), loaded.apply_fn, loaded.params, x, sig, ids_arr,
                       classes, num=settings.n, num_classes=c, settings=settings)  # fmt: skip
  wrong = np.flatnonzero(votes.sum(axis=1) != c1[np.arange(len(ids)), classes])
  if len(wrong):
    raise ValueError(
      f"the parent's votes drawn again do not add up to its recorded counts on {len(wrong)} of "
      f"{len(ids)} inputs (first: input {int(ids[wrong[0]])}): another model or platform"
    )
  return ids, classes, votes


def store_votes(parent: RunSpec, path: str, *, data_dir=None, batch=None) -> str:
  """Draws the parent run's votes (:func:`draw_votes`) and writes them beside its result file
  ``path``; returns the votes file."""
  from rsjax.cohen._recertify_check import votes_path
  from rsjax.cohen._recertify_replay import write_votes

  out = votes_path(path)
  write_votes(out, *draw_votes(parent, path, data_dir=data_dir, batch=batch))
  return out


def votes_again(parent, path, model_dir, rows, data_dir, batch, detail) -> tuple[bool, str]:
  """``(ok, detail)``: whether the stored votes of ``rows`` of the parent run ``parent``
  (result file ``path``) are its model's drawn again (``rsjax audit --parent-model-dir``);
  ``detail`` the parent's audit, extended."""
  from rsjax.cohen._recertify_check import votes_path
  from rsjax.cohen._recertify_replay import ParentVotes, parent_key

  try:
    ids, classes, votes = draw_votes(parent, path, rows, model_dir=model_dir, data_dir=data_dir,
                                     batch=batch)  # fmt: skip
    stored = ParentVotes.read(votes_path(path), parent_key(parent))
    got_classes, got = stored.rows(ids, stored.n)
  except ValueError as e:
    return False, f"{detail}; its votes: {e}"
  same = np.all(got_classes == classes, axis=0) & np.all(got == votes)
  if not same:
    bad = int(np.count_nonzero(np.any(got != votes, axis=1) | (got_classes != classes)))
    return False, f"{detail}; its stored votes differ from its model's on {bad} of {len(ids)} rows"
  return True, f"{detail}; its stored votes of the {len(ids)} rows drawn again are the model's"
