"""A certify or predict run below the command line: built by one constructor, run by one path.

:func:`prepare` builds a run's value (``rsjax.records.spec.RunSpec``) and what it certifies
(:class:`Loaded`: model, dataset, denoiser; :mod:`rsjax.app.launch.loading`) from a model
directory, a :class:`TorchCheckpoint` or a model in memory; :func:`run` certifies it
(:mod:`rsjax.app.launch.execute`), the one path every certify takes, as an
:class:`Execution` says. ``rsjax certify`` (``rsjax.app.cli.flags.run_from_flags``), ``rsjax
recertify``, ``rsjax demo``, the experiments and ``rsjax.app.audit`` are its callers. A
setting that cannot be used is a :class:`RunError` (a ``ValueError``) naming its argument.

Names are imported on first use (``rsjax._lazy``): ``rsjax.app.cli`` takes the error types
from here without importing JAX.
"""

from rsjax import _lazy

__getattr__, __dir__, __all__ = _lazy.exports(
  __name__,
  {
    "DataRange": "rsjax.app.launch.spec",
    "Execution": "rsjax.app.launch.execute",
    "Loaded": "rsjax.app.launch.spec",
    "MismatchError": "rsjax.app.launch.errors",
    "Report": "rsjax.app.launch.execute",
    "RunError": "rsjax.app.launch.errors",
    "TorchCheckpoint": "rsjax.app.launch.spec",
    "architecture_of": "rsjax.app.launch.spec",
    "key": "rsjax.app.launch.spec",
    "load": "rsjax.app.launch.spec",
    "open_dataset": "rsjax.app.launch.loading",
    "open_model_dir": "rsjax.app.launch.loading",
    "open_torch_checkpoint": "rsjax.app.launch.loading",
    "open_torch_module": "rsjax.app.launch.loading",
    "plan": "rsjax.app.launch.spec",
    "prepare": "rsjax.app.launch.spec",
    "run": "rsjax.app.launch.execute",
    "settings": "rsjax.app.launch.spec",
  },
  submodules=("errors", "execute", "loading", "spec"),
)
