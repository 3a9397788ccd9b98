"""The configuration of training: :class:`TrainConfig` (defaults of Cohen et al.), the
:class:`BatchSigma` extension point, and the optimizer a config describes."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import optax

from rsjax.stats import check_integral
from rsjax.training.objectives import Gaussian, Objective
from rsjax.training.strategies import Discard, Reweigh

__all__ = ["BatchSigma", "TrainConfig", "LATER_FIELDS", "make_optimizer", "optimizer_spec"]


class BatchSigma:
  """Per-input training sigma computed on device before each step, with a state of its own.

  The trainer's extension point for data-dependent sigma (DDRS Algorithm 2,
  :class:`rsjax.ddrs.training.DDRSConfig`): subclasses are frozen dataclasses
  (hashable: a static argument of the compiled step; ``to_json`` goes into the
  training config) that implement

  * ``init(n) -> state``: the initial state, a pytree of arrays (e.g. a ``[n]``
    sigma memory); it stays on device, is checkpointed with the model and
    restored on resume;
  * ``__call__(key, state, eval_fn, variables, x, idx, epoch) -> (state,
    sigma [B])``: traced inside the training step, before the objective, which
    then sees ``sigma`` (``eval_fn(variables, x)`` is the eval-mode classifier,
    ``idx [B]`` the dataset indices of the batch, ``epoch`` traced);
  * ``summary(state) -> dict``: JSON numbers added to each epoch's history.
  """

  def init(self, n: int) -> Any:
    raise NotImplementedError

  def __call__(self, key, state, eval_fn, variables, x, idx, epoch):
    raise NotImplementedError

  def summary(self, state: Any) -> dict:
    return {}

  def to_json(self) -> dict:
    return {"name": type(self).__name__, **dataclasses.asdict(self)}


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Hyperparameters of training (defaults of Cohen et al.).

  Attributes:
    sigma: noise level, >= 0, in [0, 1] input units (0 is clean training).
    epochs: number of epochs.
    batch_size: training batch size.
    lr: initial learning rate.
    momentum: SGD momentum.
    weight_decay: L2 weight decay added to the gradient (as torch SGD).
    lr_step: epochs between learning-rate drops.
    gamma: learning-rate factor at each drop.
    drop_last: drop the last incomplete batch of each epoch (the reference
      keeps it).
    eval_batch_size: batch size of the per-epoch evaluation and of the
      strategies' counts.
    objective: the loss (:mod:`rsjax.training.objectives`); default Gaussian
      noise with one draw per input (Cohen et al.). ``batch_size`` counts
      inputs: a step sees ``batch_size * objective.num_noise`` noisy images.
    discard: optional :class:`~rsjax.training.strategies.Discard` (Sun et al.).
    reweigh: optional :class:`~rsjax.training.strategies.Reweigh` (Sun et al.).
    batch_sigma: optional :class:`BatchSigma` giving each batch its per-input
      sigma (then ``sigma`` is only the level of the per-epoch noisy evaluation);
      not combined with the strategies or with per-input sigma in the data.
  """

  sigma: float
  epochs: int = 90
  batch_size: int = 256
  lr: float = 0.1
  momentum: float = 0.9
  weight_decay: float = 1e-4
  lr_step: int = 30
  gamma: float = 0.1
  drop_last: bool = False
  eval_batch_size: int = 1000
  objective: Objective = Gaussian()
  discard: Discard | None = None
  reweigh: Reweigh | None = None
  batch_sigma: BatchSigma | None = None

  def __post_init__(self):
    def bad(name, why):
      raise ValueError(f"{name} {why}, got {getattr(self, name)!r}")

    if not (math.isfinite(self.sigma) and self.sigma >= 0):
      bad("sigma", "must be a finite number >= 0")
    check_integral("epochs", self.epochs, 0)
    for name in ("batch_size", "lr_step", "eval_batch_size"):
      check_integral(name, getattr(self, name))
    if not (math.isfinite(self.lr) and self.lr > 0):
      bad("lr", "must be > 0")
    if not 0 <= self.momentum < 1:
      bad("momentum", "must lie in [0, 1)")
    if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
      bad("weight_decay", "must be >= 0")
    if not 0 < self.gamma <= 1:
      bad("gamma", "must lie in (0, 1]")
    if not (isinstance(self.objective, Objective) and callable(self.objective)):
      bad("objective", "must be an rsjax.training.objectives.Objective")
    for name, cls in (("discard", Discard), ("reweigh", Reweigh)):
      if getattr(self, name) is not None and not isinstance(getattr(self, name), cls):
        bad(name, f"must be None or a {cls.__name__}")
    if self.batch_sigma is not None:
      if not isinstance(self.batch_sigma, BatchSigma):
        bad("batch_sigma", "must be None or an rsjax.training.BatchSigma")
      if self.discard is not None or self.reweigh is not None:
        bad("batch_sigma", "cannot be combined with discard or reweigh")

  @property
  def strategy_epoch(self) -> int | None:
    """First epoch from which inputs are resampled (None without strategies)."""
    epochs = [s.epoch for s in (self.discard, self.reweigh) if s is not None]
    return min(epochs) if epochs else None

  def to_json(self) -> dict:
    out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
    out["objective"] = self.objective.to_json()
    for name in ("discard", "reweigh"):
      if out[name] is not None:
        out[name] = dataclasses.asdict(out[name])
    if self.batch_sigma is not None:
      out["batch_sigma"] = self.batch_sigma.to_json()
    return out


#: JSON of the fields added after the first release, as older workdirs lack them.
LATER_FIELDS = {
  "objective": Gaussian().to_json(),
  "discard": None,
  "reweigh": None,
  "batch_sigma": None,
}


def make_optimizer(config: TrainConfig, steps_per_epoch: int) -> optax.GradientTransformation:
  """SGD with momentum, coupled weight decay and a step learning-rate schedule.

  Matches ``torch.optim.SGD(lr, momentum, weight_decay)`` with
  ``StepLR(lr_step, gamma)`` stepped once per epoch: the decay is added to the
  gradient before the momentum, and the rate is ``lr * gamma ** (epoch //
  lr_step)``.
  """
  schedule = optax.exponential_decay(
    init_value=config.lr,
    transition_steps=config.lr_step * steps_per_epoch,
    decay_rate=config.gamma,
    staircase=True,
  )
  parts = []
  if config.weight_decay > 0:
    parts.append(optax.add_decayed_weights(config.weight_decay))
  parts.append(optax.sgd(schedule, momentum=config.momentum or None))
  return optax.chain(*parts)


def optimizer_spec(config: TrainConfig) -> TrainConfig:
  """The config with the fields the optimizer does not use normalized (a jit cache key)."""
  return dataclasses.replace(
    config,
    sigma=0.0,
    epochs=0,
    drop_last=False,
    eval_batch_size=1,
    objective=Gaussian(),
    discard=None,
    reweigh=None,
    batch_sigma=None,
  )
