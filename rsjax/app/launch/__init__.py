"""A certify or predict run from its command-line flags, below the command line.

``rsjax certify`` / ``rsjax predict`` (``rsjax.app.cli``) and ``rsjax.app.audit`` share
it: the flags of a run (:mod:`rsjax.app.launch.flags`), loading its model, dataset
and denoiser (:mod:`rsjax.app.launch.loading`), the run's value
(:mod:`rsjax.app.launch.spec`): ``rsjax.records.spec.RunSpec`` built once from the flags,
what it loads, and the method's plan; and the run itself (:func:`run`,
:mod:`rsjax.app.launch.execute`), the one path every certify takes. A failure the user can
fix is a :class:`CliError`.

Names are imported on first use (``rsjax._lazy``): ``rsjax.app.cli`` takes the error types
from here without importing JAX.
"""

from rsjax import _lazy

__getattr__, __dir__, __all__ = _lazy.exports(
  __name__,
  {
    "CliError": "rsjax.app.launch.errors",
    "Loaded": "rsjax.app.launch.spec",
    "MismatchError": "rsjax.app.launch.errors",
    "Report": "rsjax.app.launch.execute",
    "architecture_of": "rsjax.app.launch.spec",
    "batch_of": "rsjax.app.launch.spec",
    "key": "rsjax.app.launch.spec",
    "load": "rsjax.app.launch.spec",
    "open_dataset": "rsjax.app.launch.loading",
    "open_model_dir": "rsjax.app.launch.loading",
    "open_torch_checkpoint": "rsjax.app.launch.loading",
    "plan": "rsjax.app.launch.spec",
    "run": "rsjax.app.launch.execute",
    "run_from_flags": "rsjax.app.launch.spec",
    "settings": "rsjax.app.launch.spec",
  },
  submodules=("errors", "execute", "flags", "loading", "spec"),
)
