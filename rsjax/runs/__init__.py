"""A run: its value, its record, how its rows are certified, stored and launched.

* :mod:`rsjax.runs.spec`: ``RunSpec``, the one value of a run (its claim, model,
  data, sampling and key derivation), written as ``<file>.run.json``; which rows
  (``declared_indices``).
* :mod:`rsjax.runs.canonical`, :mod:`rsjax.runs.limits`: the claim's digest and
  the strict shape and bounds of a record.
* :mod:`rsjax.runs.record`: each row's certificate record (``.cert.jsonl``).
* :mod:`rsjax.runs.io`: result files (TSV), durable writes, resume.
* :mod:`rsjax.runs.runner`: a dataset into rows, resumably.
* :mod:`rsjax.runs.distributed`: the rows of a run split across processes.
* :mod:`rsjax.runs.launch` (imported by name: it sits above the methods and
  training): ``run(spec) -> Report``, the one certify path of the command, the
  demo and the experiments.

The submodules are imported on first use.
"""

from rsjax import _lazy

__getattr__, __dir__, __all__ = _lazy.exports(
  __name__,
  {},
  submodules=("canonical", "distributed", "io", "limits", "record", "runner", "spec"),
)
