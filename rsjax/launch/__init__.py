"""A certify or predict run from its command-line flags, below the command line.

``rsjax certify`` / ``rsjax predict`` (``rsjax.cli``) and ``rsjax.audit`` share
it: the flags of a run (:mod:`rsjax.launch.flags`), loading its model, dataset
and denoiser (:mod:`rsjax.launch.loading`), its identity
(:mod:`rsjax.launch.identity`), and the run itself, down to the method's plan
(:mod:`rsjax.launch.run`). A failure the user can fix is a :class:`CliError`.
"""

from rsjax.launch import flags as flags
from rsjax.launch.errors import CliError as CliError
from rsjax.launch.identity import run_record as run_record
from rsjax.launch.identity import upgrade_run_record as upgrade_run_record
from rsjax.launch.loading import load_dataset as load_dataset
from rsjax.launch.loading import load_model as load_model
from rsjax.launch.loading import load_torch as load_torch
from rsjax.launch.run import certificate_header as certificate_header
from rsjax.launch.run import method_plan as method_plan
from rsjax.launch.run import sampling as sampling
from rsjax.launch.run import sampling_run as sampling_run

__all__ = ["CliError", "certificate_header", "flags", "load_dataset", "load_model",
           "load_torch", "method_plan", "run_record", "sampling", "sampling_run",
           "upgrade_run_record"]
