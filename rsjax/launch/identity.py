"""The identity of a certify or predict run, kept with its result file (``<file>.run.json``).

Every flag counts except those in :data:`NOT_RUN_IDENTITY` and the options of
methods other than ``--method`` (they do not change the rows; a mismatch
names only what differs), so a new flag is part of the identity unless it is
listed there.
"""

from __future__ import annotations

import json
import os

__all__ = ["NOT_RUN_IDENTITY", "run_record", "upgrade_run_record"]

# Flags that do not change the rows (how fast, where from, how loud).
NOT_RUN_IDENTITY = frozenset({
    "func", "command", "model_dir", "torch_checkpoint", "outfile", "data_dir", "batch",
    "inputs_per_call", "quiet",
    "overwrite", "debug", "compilation_cache", "coordinator", "num_processes", "process_id",
    "run_record"})


def _other_method_options(method: str | None) -> dict:
  """``{name: default}`` of the options of the certify methods other than ``method``."""
  from rsjax import methods
  if method not in methods.METHODS:
    return {}
  own = {o.name for o in methods.METHODS[method].options}
  return {o.name: o.default for m in methods.METHODS.values() for o in m.options
          if o.name not in own}


def upgrade_run_record(path: str, run: dict) -> None:
  """Drops other methods' options (at their defaults) from a run record written before
  records held only the method's own options, so that such a file resumes."""
  from rsjax import io
  saved = io.read_run_record(path) if os.path.exists(path) else None
  others = _other_method_options(run.get("method"))
  if not saved or not any(k in others for k in saved):
    return
  kept = {k: v for k, v in saved.items() if not (k in others and v == others[k])}
  if kept == json.loads(json.dumps(run)):
    io.write_run_record(path, run)


def run_record(args, config: dict, dataset_name: str, params) -> dict:
  """The identity of the run of ``args`` (module docstring)."""
  import rsjax
  from rsjax import runner
  others = _other_method_options(getattr(args, "method", None))
  run = {k: v for k, v in vars(args).items() if k not in NOT_RUN_IDENTITY and k not in others}
  run.update(command=args.command, dataset=dataset_name, architecture=config.get("model"),
             model=runner.fingerprint(params), rsjax=rsjax.__version__)
  return run
