"""A certify or predict run from its command-line flags, below the command line.

``rsjax certify`` / ``rsjax predict`` (``rsjax.cli``) and ``rsjax.verify.audit`` share
it: the flags of a run (:mod:`rsjax.runs.launch.flags`), loading its model, dataset
and denoiser (:mod:`rsjax.runs.launch.loading`), the run's value
(:mod:`rsjax.runs.launch.spec`): ``rsjax.runs.spec.RunSpec`` built once from the flags,
what it loads, and the method's plan; and the run itself (:func:`run`,
:mod:`rsjax.runs.launch.execute`), the one path every certify takes. A failure the user can
fix is a :class:`CliError`.
"""

from rsjax.runs.launch import flags as flags
from rsjax.runs.launch.errors import CliError as CliError
from rsjax.runs.launch.errors import MismatchError as MismatchError
from rsjax.runs.launch.execute import Report as Report
from rsjax.runs.launch.execute import run as run
from rsjax.runs.launch.loading import open_dataset as open_dataset
from rsjax.runs.launch.loading import open_model_dir as open_model_dir
from rsjax.runs.launch.loading import open_torch_checkpoint as open_torch_checkpoint
from rsjax.runs.launch.spec import Loaded as Loaded
from rsjax.runs.launch.spec import architecture_of as architecture_of
from rsjax.runs.launch.spec import batch_of as batch_of
from rsjax.runs.launch.spec import key as key
from rsjax.runs.launch.spec import load as load
from rsjax.runs.launch.spec import plan as plan
from rsjax.runs.launch.spec import run_from_flags as run_from_flags
from rsjax.runs.launch.spec import settings as settings

__all__ = [
  "CliError",
  "MismatchError",
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
