"""Training of base classifiers for randomized smoothing.

* :func:`train` with a :class:`TrainConfig`: any objective of
  :mod:`rsjax.training.objectives` (Gaussian noise by default, Cohen et al.
  2019; Consistency, SmoothAdv, MACER; Gaussian with the adaptive sphere
  attack of Sun et al. 2025) on a Flax NNX model, optionally with the data
  strategies of Sun et al. (:class:`Discard`, :class:`Reweigh`) or a per-batch
  data-dependent sigma (:class:`BatchSigma`, e.g. DDRS), with per-epoch
  evaluation, orbax checkpoints and exact resume.
* :func:`training_defaults`: the schedule ``rsjax train`` uses per dataset.
* :class:`TrainJob`: what a method's trainer gets (``rsjax train --method``, the
  method's ``Training`` half); :func:`train_gaussian` is Cohen et al.'s.
* A workdir is a model directory (``config.json`` + checkpoints: loaded with
  ``rsjax.models.load_model``, written with ``rsjax.models.save_model``) with
  the trainer's ``history.json`` and resumable state in its checkpoints.
* :func:`per_sample_gradient_norms` / :func:`gradient_norm_table`: Table 1 of
  the ACR study (easy vs hard inputs); p_A and the easy/hard split are in
  :mod:`rsjax.metrics`.
"""

import inspect

from rsjax.training.analysis import gradient_norm_table as gradient_norm_table
from rsjax.training.analysis import per_sample_gradient_norms as per_sample_gradient_norms
from rsjax.training.config import BatchSigma as BatchSigma
from rsjax.training.config import TrainConfig as TrainConfig
from rsjax.training.config import make_optimizer as make_optimizer
from rsjax.training.defaults import TRAINING_DEFAULTS as TRAINING_DEFAULTS
from rsjax.training.defaults import training_defaults as training_defaults
from rsjax.training.job import TrainJob as TrainJob
from rsjax.training.job import train_gaussian as train_gaussian
from rsjax.training.objectives import MACER as MACER
from rsjax.training.objectives import OBJECTIVES as OBJECTIVES
from rsjax.training.objectives import Consistency as Consistency
from rsjax.training.objectives import Gaussian as Gaussian
from rsjax.training.objectives import Objective as Objective
from rsjax.training.objectives import SmoothAdv as SmoothAdv
from rsjax.training.objectives import SphereAttack as SphereAttack
from rsjax.training.objectives import make_objective as make_objective
from rsjax.training.strategies import Discard as Discard
from rsjax.training.strategies import Reweigh as Reweigh
from rsjax.training.strategies import correct_counts as correct_counts
from rsjax.training.strategies import discard_mask as discard_mask
from rsjax.training.strategies import resample as resample
from rsjax.training.strategies import reweigh_weights as reweigh_weights
from rsjax.training.trainer import train as train

#: Every name imported above (the submodules aside).
__all__ = sorted(
  name
  for name, value in globals().items()
  if not name.startswith("_") and not inspect.ismodule(value)
)
