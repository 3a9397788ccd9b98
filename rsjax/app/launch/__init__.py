"""A certify or predict run from its command-line flags, below the command line.

``rsjax certify`` / ``rsjax predict`` (``rsjax.app.cli``) and ``rsjax.app.audit`` share
it: the flags of a run (:mod:`rsjax.app.launch.flags`), loading its model, dataset
and denoiser (:mod:`rsjax.app.launch.loading`), the run's value
(:mod:`rsjax.app.launch.spec`): ``rsjax.records.spec.RunSpec`` built once from the flags,
what it loads, and the method's plan; and the run itself (:func:`run`,
:mod:`rsjax.app.launch.execute`), the one path every certify takes. A failure the user can
fix is a :class:`CliError`.
"""

from rsjax.app.launch import flags as flags
from rsjax.app.launch.errors import CliError as CliError
from rsjax.app.launch.errors import MismatchError as MismatchError
from rsjax.app.launch.execute import Report as Report
from rsjax.app.launch.execute import describe_batch as describe_batch
from rsjax.app.launch.execute import run as run
from rsjax.app.launch.loading import open_dataset as open_dataset
from rsjax.app.launch.loading import open_model_dir as open_model_dir
from rsjax.app.launch.loading import open_torch_checkpoint as open_torch_checkpoint
from rsjax.app.launch.spec import Loaded as Loaded
from rsjax.app.launch.spec import architecture_of as architecture_of
from rsjax.app.launch.spec import batch_of as batch_of
from rsjax.app.launch.spec import key as key
from rsjax.app.launch.spec import load as load
from rsjax.app.launch.spec import plan as plan
from rsjax.app.launch.spec import run_from_flags as run_from_flags
from rsjax.app.launch.spec import settings as settings

__all__ = [
  "CliError",
  "MismatchError",
  "Loaded",
  "Report",
  "architecture_of",
  "batch_of",
  "describe_batch",
  "flags",
  "key",
  "load",
  "open_dataset",
  "open_model_dir",
  "open_torch_checkpoint",
  "plan",
  "run",
  "run_from_flags",
  "settings",
]
