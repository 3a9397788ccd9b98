"""The names ``rsjax train --help`` lists, written out without JAX.

``rsjax.models`` and ``rsjax.training`` import JAX and Flax (2 to 5 s); their registries'
names and the training defaults by dataset are copied here so that ``rsjax --help`` and
``rsjax train --help`` import neither. ``tests/test_cli_names.py`` checks each against the
library's own table, so a new architecture or objective fails a test until it is listed.
"""

from __future__ import annotations

__all__ = ["MODELS", "OBJECTIVES", "TRAINING_DEFAULTS"]

#: The architectures of ``rsjax.models.MODELS`` (``rsjax train --model``), in its order.
MODELS = (
  "mlp",
  "cnn",
  "lenet",
  "resnet20",
  "resnet110",
  "resnet18",
  "resnet50",
  "deq",
  "mdeq",
  "cifar_resnet",
  "imagenet_resnet",
  "vit",
)

#: The training losses of ``rsjax.training.OBJECTIVES`` (``rsjax train --objective``).
OBJECTIVES = ("gaussian", "consistency", "smoothadv", "macer")

#: ``rsjax.training.TRAINING_DEFAULTS`` without its sources: ``{dataset: {field: value}}``
#: (the ``TrainingDefaults`` fields ``epochs``, ``batch_size``, ``lr``, ``lr_step``).
TRAINING_DEFAULTS = {
  "imagenet2012": {"epochs": 90, "batch_size": 256, "lr": 0.1, "lr_step": 30},
  "cifar10": {"epochs": 90, "batch_size": 256, "lr": 0.1, "lr_step": 30},
  "mnist": {"epochs": 20, "batch_size": 128, "lr": 0.05, "lr_step": 8},
  "mnist5k": {"epochs": 20, "batch_size": 128, "lr": 0.05, "lr_step": 8},
  "digits": {"epochs": 20, "batch_size": 64, "lr": 0.05, "lr_step": 8},
}
