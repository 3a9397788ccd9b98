"""A certify or predict run from its command-line flags, below the command line.

``rsjax certify`` / ``rsjax predict`` (``rsjax.cli``) and ``rsjax.audit`` share
it: the flags of a run (:mod:`rsjax.launch.flags`), loading its model, dataset
and denoiser (:mod:`rsjax.launch.loading`), the run's value
(:mod:`rsjax.launch.spec`): ``rsjax.runspec.RunSpec`` built once from the flags,
what it loads, and the method's plan; and the run itself (:func:`run`,
:mod:`rsjax.launch.execute`), the one path every certify takes. A failure the user can
fix is a :class:`CliError`.
"""

from rsjax.launch import flags as flags
from rsjax.launch.errors import CliError as CliError
from rsjax.launch.execute import Report as Report
from rsjax.launch.execute import run as run
from rsjax.launch.loading import open_dataset as open_dataset
from rsjax.launch.loading import open_model_dir as open_model_dir
from rsjax.launch.loading import open_torch_checkpoint as open_torch_checkpoint
from rsjax.launch.spec import Loaded as Loaded
from rsjax.launch.spec import architecture_of as architecture_of
from rsjax.launch.spec import batch_of as batch_of
from rsjax.launch.spec import key as key
from rsjax.launch.spec import load as load
from rsjax.launch.spec import plan as plan
from rsjax.launch.spec import run_from_flags as run_from_flags
from rsjax.launch.spec import settings as settings

__all__ = [
  "CliError",
  "Loaded",
  "Report",
  "architecture_of",
  "batch_of",
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
