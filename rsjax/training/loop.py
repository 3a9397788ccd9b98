"""The epoch loop of the trainer (:func:`rsjax.training.train`), as in flax's MNIST example.

:func:`train_epoch` is one plain loop over the batches of an epoch, one compiled
:func:`rsjax.training.steps.train_step` each (:func:`train_batch`), after the
strategies' :func:`update_weights` and the epoch's :func:`epoch_order`;
:func:`evaluate_epoch` is the held-out accuracy, :func:`run_epoch` both as the
epoch's history entry and :func:`epoch_message` its progress line. Each takes
the run's :class:`~rsjax.training.state.TrainState` and returns the next one;
checkpoints, resume and the workdir are :mod:`rsjax.training.trainer`'s.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tqdm.auto import tqdm

from rsjax.training.config import TrainConfig
from rsjax.training.state import Keys, TrainSetup, TrainState
from rsjax.training.steps import check_finite_loss, evaluate, first_bad_step
from rsjax.training.strategies import (
  Discard,
  correct_counts,
  discard_mask,
  resample,
  reweigh_weights,
)

__all__ = [
  "EpochMetrics",
  "epoch_lr",
  "epoch_message",
  "epoch_order",
  "evaluate_epoch",
  "run_epoch",
  "train_batch",
  "train_epoch",
  "update_weights",
]


class EpochMetrics(NamedTuple):
  """An epoch's means over its training inputs (``diagnostics`` over its steps)."""

  loss: float
  accuracy: float
  diagnostics: dict[str, float]


def epoch_lr(config: TrainConfig, epoch: int) -> float:
  """The learning rate of an epoch: ``lr * gamma ** (epoch // lr_step)``.

  Args:
    config: the training config (``lr``, ``gamma``, ``lr_step``).
    epoch: the 0-based epoch.
  """
  return config.lr * config.gamma ** (epoch // config.lr_step)


def epoch_order(
  key: jax.Array, weights: np.ndarray, epoch: int, strategy_epoch: int | None
) -> np.ndarray:
  """The inputs of ``epoch`` in the order they are trained on.

  Args:
    key: the shuffle stream (:attr:`Keys.shuffle`); epoch ``e`` uses ``fold_in(key, e)``.
    weights: ``[N]`` sampling weights.
    epoch: the 0-based epoch.
    strategy_epoch: the first epoch that resamples (``TrainConfig.strategy_epoch``).

  Returns:
    ``[N]`` indices: a permutation before ``strategy_epoch`` (and without one),
    from then on ``N`` draws with replacement in proportion to ``weights``.
  """
  ekey = jax.random.fold_in(key, epoch)
  n = weights.shape[0]
  if strategy_epoch is None or epoch < strategy_epoch:
    return np.asarray(jax.random.permutation(ekey, n))
  return resample(ekey, weights, n)  # |D| draws with replacement from the kept inputs


def update_weights(key: jax.Array, state: TrainState, setup: TrainSetup) -> np.ndarray:
  """The sampling weights after the discard / reweigh due at the start of ``state.epoch``.

  Args:
    key: the counts stream (:attr:`Keys.counts`); strategy ``i`` (0 discard, 1
      reweigh) of epoch ``e`` counts with ``fold_in(fold_in(key, e), i)``.
    state: the state before the epoch (its model counts, eval mode).
    setup: the run's fixed part.

  Returns:
    ``[N]`` float32 weights (``state.weights`` itself when nothing is due).

  Raises:
    ValueError: the discard kept no input.
  """
  config, epoch, weights = setup.config, state.epoch, state.weights
  due = [
    (s, i) for i, s in enumerate((config.discard, config.reweigh)) if s is not None and s.due(epoch)
  ]
  if not due:
    return weights
  variables = nnx.merge_state(state.params, state.rest)
  for s, i in due:
    kept = np.flatnonzero(weights > 0)
    counts = correct_counts(
      jax.random.fold_in(jax.random.fold_in(key, epoch), i),
      setup.apply_fn,
      variables,
      setup.x[kept],
      setup.y[kept],
      num=s.num_noise,
      num_classes=setup.num_classes,
      ids=kept,
      sigma=config.sigma if setup.train_sigma is None else setup.train_sigma[kept],
      batch_size=config.eval_batch_size,
    )
    weights = weights.copy()
    if isinstance(s, Discard):
      weights[kept] = np.where(discard_mask(counts, s.num_noise, s.threshold), weights[kept], 0.0)
    else:
      weights[kept] = reweigh_weights(counts, s.num_noise, alpha=s.alpha, p_min=s.p_min)
  if not np.any(weights > 0):
    raise ValueError(
      f"epoch {epoch + 1}: the discard kept no training input; lower the threshold or discard later"
    )
  return weights


def train_batch(
  keys: Keys, state: TrainState, setup: TrainSetup, idx: np.ndarray, epoch: jax.Array
) -> tuple[TrainState, jax.Array, dict]:
  """One compiled optimizer step on the inputs ``idx``.

  Args:
    keys: the run's streams (``noise`` and ``batch_sigma`` at ``state.step``).
    state: the state before the step.
    setup: the run's fixed part.
    idx: ``[B]`` indices of the batch's inputs.
    epoch: the 0-based epoch, an int32 scalar on ``setup.device``.

  Returns:
    ``(state, loss, aux)``: the state after the step, the loss summed over the
    batch and the objective's ``aux`` (``correct``, the model's ``diagnostics``).
  """
  step = state.step
  sigma = setup.sigma if setup.train_sigma is None else setup.train_sigma[idx]
  extra = (
    ()
    if setup.config.batch_sigma is None
    else (state.sigma_state, idx.astype(np.int32), jax.random.fold_in(keys.batch_sigma, step))
  )
  params, rest, opt_state, loss, aux, sigma_state = setup.step_fn(
    state.params,
    state.rest,
    state.opt_state,
    setup.x[idx],
    setup.y[idx],
    sigma,
    jax.random.fold_in(keys.noise, step),
    epoch,
    *extra,
  )
  state = dataclasses.replace(
    state, params=params, rest=rest, opt_state=opt_state, sigma_state=sigma_state, step=step + 1
  )
  return state, loss, aux


def train_epoch(
  keys: Keys, state: TrainState, setup: TrainSetup, *, progress: bool = False
) -> tuple[TrainState, EpochMetrics]:
  """One epoch: the strategies' update, the epoch's order, one step a batch.

  Args:
    keys: the run's streams.
    state: the state after ``state.epoch`` epochs.
    setup: the run's fixed part.
    progress: show a tqdm bar of the batches.

  Returns:
    ``(state, metrics)``: the state one epoch later and the epoch's training
    loss and accuracy (on the noisy copies) and mean diagnostics.

  Raises:
    FloatingPointError: the loss became NaN or inf (the message names the step).
  """
  config, epoch, steps = setup.config, state.epoch, setup.steps_per_epoch
  if config.strategy_epoch is not None:
    state = dataclasses.replace(state, weights=update_weights(keys.counts, state, setup))
  perm = epoch_order(keys.shuffle, state.weights, epoch, config.strategy_epoch)
  epoch_arr = jax.device_put(jnp.int32(epoch), setup.device)
  loss_sum: int | jax.Array = 0
  correct_sum: int | jax.Array = 0
  diag_sum: dict[str, jax.Array] = {}  # the model's Diagnostic values (and aux_loss), summed
  seen = 0
  first_bad = jnp.int32(-1)  # first step of the epoch with a non-finite loss (on device)
  bar = tqdm(
    total=steps,
    desc=f"epoch {epoch + 1}/{config.epochs}",
    disable=not progress,
    leave=False,
    dynamic_ncols=True,
  )
  for b in range(steps):
    idx = perm[b * config.batch_size : (b + 1) * config.batch_size]
    step = state.step
    state, loss, aux = train_batch(keys, state, setup, idx, epoch_arr)
    loss_sum, correct_sum = loss_sum + loss, correct_sum + aux["correct"]
    diag_sum = {k: diag_sum.get(k, 0.0) + v for k, v in aux.get("diagnostics", {}).items()}
    seen += idx.shape[0]
    first_bad = first_bad_step(first_bad, loss, step)
    bar.update(1)
    if progress and (b % 50 == 49 or b == steps - 1):
      bar.set_postfix(loss=f"{float(loss_sum) / seen:.4f}", acc=f"{float(correct_sum) / seen:.3f}")
  bar.close()
  check_finite_loss(int(first_bad), epoch, steps)
  diagnostics = {k: float(v) / steps for k, v in diag_sum.items()}
  metrics = EpochMetrics(float(loss_sum) / seen, float(correct_sum) / seen, diagnostics)
  return dataclasses.replace(state, epoch=epoch + 1), metrics


def evaluate_epoch(
  key: jax.Array, state: TrainState, setup: TrainSetup, epoch: int
) -> tuple[float | None, float | None]:
  """Clean and noisy accuracy on ``setup.eval_data`` (None, None without it).

  Args:
    key: the evaluation stream (:attr:`Keys.eval`); epoch ``e`` uses ``fold_in(key, e)``.
    state: the state to evaluate (eval mode).
    setup: the run's fixed part (``eval_data``: ``x [M, ...]``, ``y [M]``).
    epoch: the 0-based epoch just trained.
  """
  if setup.eval_data is None:
    return None, None
  variables = nnx.merge_state(state.params, state.rest)
  x, y = setup.eval_data
  ekey = jax.random.fold_in(key, epoch)
  return evaluate(setup.eval_fn, variables, x, y, ekey, setup.config.eval_batch_size)


def run_epoch(
  keys: Keys, state: TrainState, setup: TrainSetup, *, progress: bool = False
) -> tuple[TrainState, dict[str, Any]]:
  """:func:`train_epoch` and :func:`evaluate_epoch`, and the epoch's history entry.

  Args:
    keys: the run's streams.
    state: the state after ``state.epoch`` epochs.
    setup: the run's fixed part.
    progress: show a tqdm bar of the batches.

  Returns:
    ``(state, entry)``: the entry as :func:`rsjax.training.train` documents it.
  """
  t0 = time.perf_counter()
  epoch, config = state.epoch, setup.config
  state, metrics = train_epoch(keys, state, setup, progress=progress)
  clean, noisy = evaluate_epoch(keys.eval, state, setup, epoch)
  entry: dict[str, Any] = {
    "epoch": epoch + 1,
    "lr": epoch_lr(config, epoch),
    "train_loss": metrics.loss,
    "train_acc": metrics.accuracy,
    "clean_acc": clean,
    "noisy_acc": noisy,
  }
  if config.strategy_epoch is not None:
    entry["kept_fraction"] = float(np.mean(state.weights > 0))
  if config.batch_sigma is not None:
    entry.update(config.batch_sigma.summary(state.sigma_state))
  entry.update(metrics.diagnostics)
  entry["seconds"] = time.perf_counter() - t0
  return state, entry


def epoch_message(entry: dict[str, Any], state: TrainState, config: TrainConfig) -> str:
  """The progress line of an epoch.

  Args:
    entry: the epoch's history entry (:func:`run_epoch`).
    state: the state after the epoch (a ``batch_sigma``'s summary).
    config: the training config.
  """
  msg = (
    f"epoch {entry['epoch']}/{config.epochs}  lr {entry['lr']:.4g}  "
    f"loss {entry['train_loss']:.4f}  train acc {entry['train_acc']:.4f}"
  )
  if entry["clean_acc"] is not None:
    msg += f"  clean acc {entry['clean_acc']:.4f}  noisy acc {entry['noisy_acc']:.4f}"
  if config.strategy_epoch is not None:
    msg += f"  kept {entry['kept_fraction']:.3f}"
  if config.batch_sigma is not None:
    summary = config.batch_sigma.summary(state.sigma_state)
    msg += "".join(f"  {k} {v:.4g}" for k, v in summary.items())
  return msg + f"  ({entry['seconds']:.1f} s)"
