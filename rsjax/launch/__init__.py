"""A certify or predict run from its command-line flags, below the command line.

``rsjax certify`` / ``rsjax predict`` (``rsjax.cli``) and ``rsjax.audit`` share
it: the flags of a run (:mod:`rsjax.launch.flags`), loading its model, dataset
and denoiser (:mod:`rsjax.launch.loading`), and the run itself
(:mod:`rsjax.launch.run`): its value (``rsjax.runspec.RunSpec``) built once
from the flags, what it loads, and the method's plan. A failure the user can
fix is a :class:`CliError`.
"""

from rsjax.launch import flags as flags
from rsjax.launch.errors import CliError as CliError
from rsjax.launch.loading import open_dataset as open_dataset
from rsjax.launch.loading import open_model_dir as open_model_dir
from rsjax.launch.loading import open_torch_checkpoint as open_torch_checkpoint
from rsjax.launch.run import Loaded as Loaded
from rsjax.launch.run import key as key
from rsjax.launch.run import load as load
from rsjax.launch.run import plan as plan
from rsjax.launch.run import run_from_flags as run_from_flags
from rsjax.launch.run import settings as settings

__all__ = [
  "CliError",
  "Loaded",
  "flags",
  "key",
  "load",
  "open_dataset",
  "open_model_dir",
  "open_torch_checkpoint",
  "plan",
  "run_from_flags",
  "settings",
]
