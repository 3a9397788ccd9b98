"""Training settings by dataset: what ``rsjax train`` uses for the flags not given.

Cohen et al.'s ``train.py`` defaults (90 epochs, batch 256, lr 0.1 dropped
10x every 30 epochs) are the ImageNet and CIFAR-10 settings of the
literature; on the small offline datasets they mean hours of CPU time for no
gain. The MNIST settings are the demo's (``rsjax demo``: LeNet on ``mnist5k``,
clean accuracy 0.99 at sigma 0.25, see docs/getting-started.md); ``digits`` (1,797 8x8
images) takes the same schedule with smaller batches.
"""

from __future__ import annotations

import dataclasses

__all__ = ["TrainingDefaults", "TRAINING_DEFAULTS", "training_defaults"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingDefaults:
  """Default schedule of one dataset (``rsjax.training.TrainConfig`` fields).

  Attributes:
    epochs: passes over the training data.
    batch_size: inputs per step.
    lr: initial SGD learning rate.
    lr_step: epochs between the learning-rate drops (x ``gamma`` = 0.1).
    source: where the numbers come from.
  """

  epochs: int
  batch_size: int
  lr: float
  lr_step: int
  source: str

  def describe(self) -> str:
    """``epochs 20, batch 128, lr 0.05, lr-step-size 8`` (CLI words)."""
    return (
      f"epochs {self.epochs}, batch {self.batch_size}, lr {self.lr:g}, lr-step-size {self.lr_step}"
    )


_COHEN = TrainingDefaults(
  epochs=90, batch_size=256, lr=0.1, lr_step=30, source="Cohen et al.'s train.py"
)
_DEMO = TrainingDefaults(epochs=20, batch_size=128, lr=0.05, lr_step=8, source="the demo's")

#: The defaults of `rsjax train` for each dataset (epochs, batch, learning rate and schedule).
TRAINING_DEFAULTS: dict[str, TrainingDefaults] = {
  "imagenet2012": _COHEN,
  "cifar10": _COHEN,
  "mnist": _DEMO,
  "mnist5k": _DEMO,
  "digits": dataclasses.replace(_DEMO, batch_size=64, source="the demo's, batch 64"),
}


def training_defaults(dataset: str) -> TrainingDefaults:
  """The default schedule of ``dataset`` (Cohen et al.'s for a dataset not listed)."""
  return TRAINING_DEFAULTS.get(dataset, _COHEN)
