"""Training of base classifiers for randomized smoothing.

* :func:`train`: Gaussian-noise training (Cohen et al. 2019) of any Flax NNX
  model, with per-epoch evaluation, orbax checkpoints and exact resume.
* :func:`load_model` / :func:`restore_model`: rebuild a trained model from its
  workdir (``config.json`` + checkpoints).
"""

from rsjax.training.gaussian import TrainConfig as TrainConfig
from rsjax.training.gaussian import make_optimizer as make_optimizer
from rsjax.training.gaussian import train as train
from rsjax.training.workdir import load_model as load_model
from rsjax.training.workdir import read_config as read_config
from rsjax.training.workdir import restore_model as restore_model

__all__ = ["TrainConfig", "load_model", "make_optimizer", "read_config", "restore_model", "train"]
