"""A run: what a method is, each row's record, and how a dataset's rows are certified.

* :mod:`rsjax.runs.method`: what a certify method is (``Method``, its ``Training`` half,
  ``Option``, ``Context`` and the ``Certifier`` protocol), handed on by
  ``rsjax.methods`` with the registry.
* :mod:`rsjax.runs.record`: each row's certificate record (``.cert.jsonl``).
* :mod:`rsjax.runs.runner`: a dataset into rows, resumably.
* :mod:`rsjax.runs.distributed`: the rows of a run split across processes.

The run's value and its files are :mod:`rsjax.records`, below; the one certify path of
the command, the demo and the experiments (``run(spec) -> Report``) is
:mod:`rsjax.app.launch`, above the methods and training. The submodules are imported on
first use.
"""

from rsjax import _lazy

__getattr__, __dir__, __all__ = _lazy.exports(
  __name__,
  {},
  submodules=("distributed", "method", "record", "runner"),
)
