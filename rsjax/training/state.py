"""The state of a training run and its fixed part (:func:`rsjax.training.train`).

As flax's MNIST example: a :class:`TrainState` value that each epoch replaces
(:func:`init_state` the first, :mod:`rsjax.training.trainer` restores one from a
checkpoint), and a :class:`TrainSetup` of what a run keeps fixed, the checked
data and the compiled steps (:func:`make_setup`). :class:`Keys` are the streams
of the run's key (module docstring of :mod:`rsjax.training.trainer`). The epoch
loop is :mod:`rsjax.training.loop`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
import optax
from flax import nnx

from rsjax.models import to_apply_fn, to_train_fn
from rsjax.training.config import TrainConfig, make_optimizer, optimizer_spec
from rsjax.training.inputs import check_data, split_sigma
from rsjax.training.steps import eval_step, train_step

if TYPE_CHECKING:
  from rsjax.engine.step import ApplyFn

__all__ = [
  "Keys",
  "TrainSetup",
  "TrainState",
  "check_inputs",
  "init_state",
  "make_setup",
  "place_state",
]


class Keys(NamedTuple):
  """The streams of a run's key: ``fold_in(key, i)`` for the ``i`` of each field."""

  shuffle: jax.Array  # 0: the order of epoch e from fold_in(shuffle, e)
  noise: jax.Array  # 1: the noise of global step t from fold_in(noise, t)
  eval: jax.Array  # 2: the noisy evaluation of epoch e from fold_in(eval, e)
  counts: jax.Array  # 3: the strategies' counts of epoch e from fold_in(counts, e)
  batch_sigma: jax.Array  # 4: a BatchSigma's key of step t from fold_in(batch_sigma, t)

  @classmethod
  def of(cls, key: jax.Array) -> Keys:
    """The five streams of a run's key.

    Args:
      key: a ``jax.random.key``.
    """
    return cls(*(jax.random.fold_in(key, i) for i in range(5)))


@dataclasses.dataclass(frozen=True)
class TrainState:
  """What a run changes, epoch by epoch (a checkpoint holds all but ``step``).

  Attributes:
    params: the model's ``nnx.Param`` state.
    rest: its other state (BatchNorm statistics, RNG counters).
    opt_state: the optimizer's state.
    weights: ``[N]`` float32 sampling weights of the data strategies (0: discarded).
    sigma_state: the state of ``config.batch_sigma`` (None without one).
    epoch: epochs finished.
    step: optimizer steps taken (``epoch * steps_per_epoch`` between epochs).
  """

  params: nnx.State
  rest: nnx.State
  opt_state: optax.OptState
  weights: np.ndarray
  sigma_state: Any = None
  epoch: int = 0
  step: int = 0


@dataclasses.dataclass(frozen=True)
class TrainSetup:
  """What a run keeps fixed.

  Attributes:
    config: the training config.
    x: ``[N, *input_shape]`` float32 training inputs in [0, 1].
    y: ``[N]`` int32 labels.
    train_sigma: ``[N]`` float32 per-input training sigma, or None.
    eval_data: ``(x [M, *input_shape], y [M])`` held out, or None.
    num_classes: the model's number of outputs.
    steps_per_epoch: optimizer steps an epoch.
    data_info: the JSON description of the data in a workdir's config and checkpoints.
    apply_fn: the eval-mode classifier ``apply_fn(variables, x) -> logits``.
    step_fn: :func:`rsjax.training.steps.train_step` with its static arguments bound.
    eval_fn: :func:`rsjax.training.steps.eval_step` with ``apply_fn`` and ``sigma`` bound.
    device: the one placement of the state, fresh or restored (one compiled step).
    sigma: ``config.sigma`` as a float32 scalar on ``device``.
  """

  config: TrainConfig
  x: np.ndarray
  y: np.ndarray
  train_sigma: np.ndarray | None
  eval_data: tuple[np.ndarray, np.ndarray] | None
  num_classes: int
  steps_per_epoch: int
  data_info: dict[str, Any]
  apply_fn: ApplyFn
  step_fn: Callable[..., Any]
  eval_fn: Callable[..., Any]
  device: jax.sharding.Sharding
  sigma: jax.Array


def check_inputs(
  train_data: Sequence[npt.ArrayLike],
  config: TrainConfig,
  eval_data: Sequence[npt.ArrayLike] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, tuple[np.ndarray, np.ndarray] | None]:
  """The checked data: ``(x [N, ...], y [N], sigma [N] or None, (x, y) held out or None)``.

  Args:
    train_data: ``(x [N, ...], y [N])`` or ``(x, y, sigma [N])``.
    config: the training config (``batch_sigma``, ``drop_last``, ``batch_size``).
    eval_data: ``(x [M, ...], y [M])`` or None.

  Raises:
    ValueError: bad data, per-input sigma with a ``batch_sigma``, or fewer
      inputs than a batch with ``drop_last``.
  """
  train_data, train_sigma = split_sigma(train_data)
  if config.batch_sigma is not None and train_sigma is not None:
    raise ValueError("train_data with per-input sigma cannot be combined with config.batch_sigma")
  x, y = check_data(train_data, "train_data")
  ev = check_data(eval_data, "eval_data") if eval_data is not None else None
  if config.drop_last and x.shape[0] < config.batch_size:
    raise ValueError(
      f"batch_size {config.batch_size} > number of training inputs {x.shape[0]} with drop_last"
    )
  return x, y, train_sigma, ev


def make_setup(
  model: nnx.Module,
  train_data: Sequence[npt.ArrayLike],
  config: TrainConfig,
  eval_data: Sequence[npt.ArrayLike] | None = None,
) -> tuple[TrainSetup, nnx.State, nnx.State]:
  """The fixed part of a run of ``model`` on the data, and the model's ``(params, rest)``.

  Args:
    model: an NNX classifier on ``[b, *input_shape]`` in [0, 1] (not changed).
    train_data: ``(x [N, ...], y [N])`` or ``(x, y, sigma [N])``.
    config: the training config.
    eval_data: ``(x [M, ...], y [M])`` or None.

  Raises:
    ValueError: the checks of :func:`check_inputs`, or a label the model has no output for.
  """
  x, y, train_sigma, ev = check_inputs(train_data, config, eval_data)
  n = x.shape[0]
  steps = n // config.batch_size if config.drop_last else -(-n // config.batch_size)
  train_fn, params, rest = to_train_fn(model)
  apply_fn, _ = to_apply_fn(model)
  num_classes = int(jax.eval_shape(train_fn, params, rest, x[:1])[0].shape[-1])
  for name, labels in (("train_data", y), ("eval_data", None if ev is None else ev[1])):
    if labels is not None and labels.max() >= num_classes:
      raise ValueError(f"{name}: label {labels.max()} >= number of model outputs {num_classes}")
  data_info: dict[str, Any] = {
    "num_train": int(n),
    "input_shape": list(x.shape[1:]),
    "num_classes": num_classes,
  }
  if train_sigma is not None:
    data_info["per_input_sigma"] = True
  device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  sigma = jax.device_put(jnp.float32(config.sigma), device)
  step_fn = functools.partial(
    train_step,
    graphdef=train_fn.graphdef,
    eval_fn=apply_fn,
    objective=config.objective,
    spec=optimizer_spec(config),
    steps_per_epoch=steps,
    batch_sigma=config.batch_sigma,
  )
  eval_fn = functools.partial(eval_step, sigma=sigma, apply_fn=apply_fn)
  setup = TrainSetup(
    config=config,
    x=x,
    y=y,
    train_sigma=train_sigma,
    eval_data=ev,
    num_classes=num_classes,
    steps_per_epoch=steps,
    data_info=data_info,
    apply_fn=apply_fn,
    step_fn=step_fn,
    eval_fn=eval_fn,
    device=device,
    sigma=sigma,
  )
  return setup, params, rest


def init_state(setup: TrainSetup, params: nnx.State, rest: nnx.State) -> TrainState:
  """The state before the first epoch: the model's, a fresh optimizer's, all weights 1.

  Args:
    setup: the run's fixed part.
    params: the model's ``nnx.Param`` state.
    rest: its other state.
  """
  n = setup.x.shape[0]
  batch_sigma = setup.config.batch_sigma
  return TrainState(
    params=params,
    rest=rest,
    opt_state=make_optimizer(setup.config, setup.steps_per_epoch).init(params),
    weights=np.ones(n, np.float32),
    sigma_state=None if batch_sigma is None else batch_sigma.init(n),
  )


def place_state(state: TrainState, device: jax.sharding.Sharding) -> TrainState:
  """``state`` with its arrays committed to ``device`` (the weights stay NumPy).

  Args:
    state: a fresh or restored state.
    device: the run's placement (``TrainSetup.device``): one for both, so a
      resumed run reuses the compiled step.
  """
  names = ("params", "rest", "opt_state", "sigma_state")
  return dataclasses.replace(state, **jax.device_put({n: getattr(state, n) for n in names}, device))
