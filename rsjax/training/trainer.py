"""The trainer: any objective of :mod:`rsjax.training.objectives` on an NNX model.

Each step draws fresh noise for every input of the batch, in the [0, 1] input
scale, and adds it before the model (which normalizes internally); what the
step minimizes is the configured objective (Gaussian noise by default, Cohen et
al. 2019, ``code/train.py``), compiled with the optimizer update into one
``jax.jit`` program. The optimizer is SGD with momentum and (coupled,
PyTorch-style) weight decay; the learning rate drops by ``gamma`` every
``lr_step`` epochs. Defaults are those of the reference: lr 0.1, momentum 0.9,
weight decay 1e-4, step 30, gamma 0.1, batch 256, 90 epochs.

Randomness comes from one key: the shuffle of epoch ``e`` from
``fold_in(fold_in(key, 0), e)``, the noise of global step ``t`` from
``fold_in(fold_in(key, 1), t)``, the noisy evaluation of epoch ``e`` from
``fold_in(fold_in(key, 2), e)`` and the counts of the data strategies
(:mod:`rsjax.training.strategies`) at epoch ``e`` from
``fold_in(fold_in(key, 3), e)`` and the per-batch sigma of a
:class:`BatchSigma` at step ``t`` from ``fold_in(fold_in(key, 4), t)``. With a
``workdir`` the state is checkpointed after every epoch and a restarted run
resumes from the last finished epoch; it ends with the same weights as an
uninterrupted run. The checks of the data and of a resumed run are in
:mod:`rsjax.training.inputs`.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from flax import nnx
from tqdm.auto import tqdm

from rsjax import models
from rsjax.checkpoint import Checkpoints
from rsjax.engine.counts import as_key
from rsjax.io import write_json
from rsjax.training.config import TrainConfig, make_optimizer, optimizer_spec

if TYPE_CHECKING:
  from rsjax.util import KeyLike
from rsjax.training.inputs import check_compatible, check_data, split_sigma
from rsjax.training.steps import check_finite_loss, eval_step, evaluate, first_bad_step, train_step
from rsjax.training.strategies import (
  Discard,
  correct_counts,
  discard_mask,
  resample,
  reweigh_weights,
)

__all__ = ["HISTORY_FILE", "train"]

# The per-epoch metrics in a workdir, next to its model directory (``rsjax.models``).
HISTORY_FILE = "history.json"

_M = TypeVar("_M", bound=nnx.Module)


@overload
def train(
  key: KeyLike,
  model: _M,
  train_data: Sequence[npt.ArrayLike],
  config: TrainConfig,
  *,
  eval_data: Sequence[npt.ArrayLike] | None = None,
  workdir: str | os.PathLike | None = None,
  resume: bool = True,
  model_config: Mapping | None = None,
  keep_checkpoints: int = 2,
  progress: bool = True,
  on_epoch_end: Callable[[dict], None] | None = None,
  return_state: Literal[False] = False,
) -> tuple[_M, list[dict]]: ...


@overload
def train(
  key: KeyLike,
  model: _M,
  train_data: Sequence[npt.ArrayLike],
  config: TrainConfig,
  *,
  eval_data: Sequence[npt.ArrayLike] | None = None,
  workdir: str | os.PathLike | None = None,
  resume: bool = True,
  model_config: Mapping | None = None,
  keep_checkpoints: int = 2,
  progress: bool = True,
  on_epoch_end: Callable[[dict], None] | None = None,
  return_state: Literal[True],
) -> tuple[_M, list[dict], Any]: ...


def train(
  key: KeyLike,
  model: _M,
  train_data: Sequence[npt.ArrayLike],
  config: TrainConfig,
  *,
  eval_data: Sequence[npt.ArrayLike] | None = None,
  workdir: str | os.PathLike | None = None,
  resume: bool = True,
  model_config: Mapping | None = None,
  keep_checkpoints: int = 2,
  progress: bool = True,
  on_epoch_end: Callable[[dict], None] | None = None,
  return_state: bool = False,
) -> tuple[_M, list[dict]] | tuple[_M, list[dict], Any]:
  """Trains an NNX classifier on noisy inputs with the configured objective.

  Args:
    key: a ``jax.random.key`` (or int seed) for shuffling, noise and evaluation.
    model: a Flax NNX model ``model(x) -> logits`` taking ``[b, *input_shape]``
      in [0, 1]. BatchNorm/Dropout run in train mode for the updates and in
      eval mode for the evaluation, the attacks of the objectives and the
      strategies' counts (the model's own flags are not changed). Its weights
      are updated in place and it is returned.
    train_data: ``(x [N, ...] float in [0, 1], y [N] int)`` NumPy arrays, or
      ``(x, y, sigma [N])`` with one training noise level per input (it then
      replaces ``config.sigma`` for training and the strategies).
    config: a :class:`TrainConfig` (sigma, schedule, objective, strategies).
    eval_data: optional held-out ``(x, y)``; clean and noisy (one draw of
      sigma-noise per input) accuracy are computed after every epoch.
    workdir: optional directory for ``config.json``, ``history.json`` and
      per-epoch orbax checkpoints (model state, optimizer state, epoch, key,
      and the strategies' sampling weights).
    resume: with a workdir holding checkpoints, continue from the last
      finished epoch (the training config, except ``epochs``, and the key must
      match). If False and checkpoints exist, raise instead of overwriting.
    model_config: JSON-serializable description of the model saved in
      ``config.json`` so that :func:`rsjax.models.load_model` can rebuild it,
      e.g. ``{"model": "lenet", "num_classes": 10, "input_shape": [28, 28, 1]}``
      (optional ``"model_kwargs"`` for ``create_model``).
    keep_checkpoints: number of epoch checkpoints kept.
    progress: show a tqdm progress bar and a line per epoch.
    on_epoch_end: optional callback receiving each epoch's history entry.
    return_state: also return the final state of ``config.batch_sigma`` (NumPy
      arrays; None without one).

  Raises:
    FloatingPointError: the training loss became NaN or inf (checked at the end
      of each epoch, before its checkpoint; the message names the step).

  Returns:
    ``(model, history)``: the trained model (same object) and a list with one
    dict per epoch: ``epoch`` (1-based), ``lr``, ``train_loss``, ``train_acc``
    (on the noisy training copies), ``clean_acc`` and ``noisy_acc`` (None
    without ``eval_data``), ``seconds``, with a strategy ``kept_fraction``
    (the fraction of training inputs with a nonzero sampling weight), with
    ``config.batch_sigma`` its ``summary`` of the state, and the epoch means of
    the model's ``rsjax.models.Diagnostic`` variables by name (a DEQ's
    ``solver_residual``, ``solver_steps``, ``jacobian``) and of its ``AuxLoss``
    terms (``aux_loss``), which the step adds to the loss. With
    ``return_state``: ``(model, history, state)``.
  """
  from rsjax.models import to_apply_fn, to_train_fn

  if not isinstance(config, TrainConfig):
    raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
  key = as_key(key)
  train_data, train_sigma = split_sigma(train_data)
  batch_sigma = config.batch_sigma
  if batch_sigma is not None and train_sigma is not None:
    raise ValueError("train_data with per-input sigma cannot be combined with config.batch_sigma")
  x, y = check_data(train_data, "train_data")
  ev = check_data(eval_data, "eval_data") if eval_data is not None else None
  n = x.shape[0]
  if config.drop_last and n < config.batch_size:
    raise ValueError(
      f"batch_size {config.batch_size} > number of training inputs {n} with drop_last"
    )
  steps_per_epoch = n // config.batch_size if config.drop_last else -(-n // config.batch_size)

  train_fn, params, rest = to_train_fn(model)
  apply_fn, _ = to_apply_fn(model)
  logits_shape = jax.eval_shape(train_fn, params, rest, x[:1])[0].shape
  num_classes = logits_shape[-1]
  for name, labels in (("train_data", y), ("eval_data", None if ev is None else ev[1])):
    if labels is not None and labels.max() >= num_classes:
      raise ValueError(f"{name}: label {labels.max()} >= number of model outputs {num_classes}")
  tx = make_optimizer(config, steps_per_epoch)
  opt_state = tx.init(params)
  strategies = config.strategy_epoch is not None
  weights = np.ones(n, np.float32)  # sampling weights of the strategies (0 = discarded)
  sigma_state = None if batch_sigma is None else batch_sigma.init(n)

  shuffle_key = jax.random.fold_in(key, 0)
  noise_key = jax.random.fold_in(key, 1)
  eval_key = jax.random.fold_in(key, 2)
  count_key = jax.random.fold_in(key, 3)
  batch_sigma_key = jax.random.fold_in(key, 4)
  key_data = np.asarray(jax.random.key_data(key)).tolist()

  def state_items(
    params: nnx.State, rest: nnx.State, opt_state: Any, weights: np.ndarray, sigma_state: Any
  ) -> dict[str, dict[str, Any]]:
    """The checkpointed pytrees (also the restore targets)."""
    state = {"opt_state": opt_state, "key": jax.random.key_data(key)}
    if strategies:
      state["weights"] = jnp.asarray(weights)
    if batch_sigma is not None:
      state["batch_sigma"] = sigma_state
    return {"model": {"params": params, "rest": rest}, "train": state}

  data_info = {
    "num_train": int(n),
    "input_shape": list(x.shape[1:]),
    "num_classes": int(num_classes),
  }
  if train_sigma is not None:
    data_info["per_input_sigma"] = True

  history: list[dict] = []
  start_epoch = 0
  ckpt = None
  if workdir is not None:
    workdir = os.fspath(workdir)
    os.makedirs(workdir, exist_ok=True)
    ckpt = Checkpoints(os.path.join(workdir, models.CHECKPOINT_DIR), max_to_keep=keep_checkpoints)
    try:
      latest = ckpt.latest_step()
      if latest is not None and not resume:
        raise ValueError(
          f"workdir {workdir!r} already holds checkpoints (epoch {latest}); pass resume=True to "
          "continue, or use a new workdir"
        )
      if latest is not None:
        items, meta = ckpt.restore(
          latest, targets=state_items(params, rest, opt_state, weights, sigma_state)
        )
        check_compatible(meta["config"], config.to_json(), "training config")
        check_compatible(meta["data"], data_info, "training data")
        if meta["key"] != key_data:
          raise ValueError("cannot resume: key differs from the key of the checkpointed run")
        params, rest = items["model"]["params"], items["model"]["rest"]
        opt_state = items["train"]["opt_state"]
        if strategies:
          weights = np.asarray(items["train"]["weights"], np.float32)
        if batch_sigma is not None:
          sigma_state = items["train"]["batch_sigma"]
        start_epoch = int(meta["epoch"])
        history = list(meta["history"])
        cfg_path = os.path.join(workdir, models.CONFIG_FILE)
        if meta["config"].get("epochs") != config.epochs and os.path.exists(cfg_path):
          # More (or fewer) epochs than the run began with: config.json says the
          # epochs now asked for, so a reader can tell a finished run from a cut one.
          cfg = models.read_config(workdir)
          cfg["train"] = config.to_json()
          models.write_config(workdir, cfg)
        if progress:
          tqdm.write(
            f"resuming {workdir} after epoch {start_epoch} of {config.epochs} "
            "(a new workdir starts over)"
          )
      else:
        cfg = dict(model_config or {})
        for reserved in ("sigma", "train", "data"):
          if reserved in cfg:
            raise ValueError(f"model_config must not contain the key {reserved!r}")
        cfg.update(sigma=config.sigma, train=config.to_json(), data=data_info)
        models.write_config(workdir, cfg)
    except BaseException:
      ckpt.close()
      raise

  # One committed placement for fresh and restored state alike, so a resumed run
  # reuses the compiled step (single-device training).
  device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  params, rest, opt_state, sigma_state = jax.device_put(
    (params, rest, opt_state, sigma_state), device
  )
  sigma_arr = jax.device_put(jnp.float32(config.sigma), device)
  step_fn = functools.partial(
    train_step,
    graphdef=train_fn.graphdef,
    eval_fn=apply_fn,
    objective=config.objective,
    spec=optimizer_spec(config),
    steps_per_epoch=steps_per_epoch,
    batch_sigma=batch_sigma,
  )
  eval_fn = functools.partial(eval_step, sigma=sigma_arr, apply_fn=apply_fn)
  schedule_lr = lambda epoch: config.lr * config.gamma ** (epoch // config.lr_step)  # noqa: E731

  def update_weights(epoch: int, weights: np.ndarray) -> np.ndarray:
    """Applies the discard / reweigh due at the start of ``epoch``."""
    due = [
      (s, i)
      for i, s in enumerate((config.discard, config.reweigh))
      if s is not None and s.due(epoch)
    ]
    if not due:
      return weights
    variables = nnx.merge_state(params, rest)
    for s, i in due:
      kept = np.flatnonzero(weights > 0)
      counts = correct_counts(
        jax.random.fold_in(jax.random.fold_in(count_key, epoch), i),
        apply_fn,
        variables,
        x[kept],
        y[kept],
        num=s.num_noise,
        num_classes=num_classes,
        ids=kept,
        sigma=config.sigma if train_sigma is None else train_sigma[kept],
        batch_size=config.eval_batch_size,
      )
      weights = weights.copy()
      if isinstance(s, Discard):
        weights[kept] = np.where(discard_mask(counts, s.num_noise, s.threshold), weights[kept], 0.0)
      else:
        weights[kept] = reweigh_weights(counts, s.num_noise, alpha=s.alpha, p_min=s.p_min)
    if not np.any(weights > 0):
      raise ValueError(
        f"epoch {epoch + 1}: the discard kept no training input; lower the "
        "threshold or discard later"
      )
    return weights

  def epoch_order(epoch: int, weights: np.ndarray) -> np.ndarray:
    ekey = jax.random.fold_in(shuffle_key, epoch)
    if config.strategy_epoch is None or epoch < config.strategy_epoch:  # (not strategies)
      return np.asarray(jax.random.permutation(ekey, n))
    return resample(ekey, weights, n)  # |D| draws with replacement from the kept inputs

  try:
    for epoch in range(start_epoch, config.epochs):
      t0 = time.perf_counter()
      if strategies:
        weights = update_weights(epoch, weights)
      perm = epoch_order(epoch, weights)
      epoch_arr = jax.device_put(jnp.int32(epoch), device)
      loss_sum = correct_sum = 0
      # the model's Diagnostic values (and aux_loss), summed over the steps
      diag_sum: dict[str, jax.Array] = {}
      seen = 0
      first_bad = jnp.int32(-1)  # first step of the epoch with a non-finite loss (on device)
      bar = tqdm(
        total=steps_per_epoch,
        desc=f"epoch {epoch + 1}/{config.epochs}",
        disable=not progress,
        leave=False,
        dynamic_ncols=True,
      )
      for b in range(steps_per_epoch):
        idx = perm[b * config.batch_size : (b + 1) * config.batch_size]
        step = epoch * steps_per_epoch + b
        sig = sigma_arr if train_sigma is None else train_sigma[idx]
        extra = (
          ()
          if batch_sigma is None
          else (sigma_state, idx.astype(np.int32), jax.random.fold_in(batch_sigma_key, step))
        )
        params, rest, opt_state, loss, aux, sigma_state = step_fn(
          params,
          rest,
          opt_state,
          x[idx],
          y[idx],
          sig,
          jax.random.fold_in(noise_key, step),
          epoch_arr,
          *extra,
        )
        loss_sum, correct_sum = loss_sum + loss, correct_sum + aux["correct"]
        diag_sum = {k: diag_sum.get(k, 0.0) + v for k, v in aux.get("diagnostics", {}).items()}
        seen += idx.shape[0]
        first_bad = first_bad_step(first_bad, loss, step)
        bar.update(1)
        if progress and (b % 50 == 49 or b == steps_per_epoch - 1):
          bar.set_postfix(
            loss=f"{float(loss_sum) / seen:.4f}", acc=f"{float(correct_sum) / seen:.3f}"
          )
      bar.close()
      check_finite_loss(int(first_bad), epoch, steps_per_epoch)
      entry = {
        "epoch": epoch + 1,
        "lr": schedule_lr(epoch),
        "train_loss": float(loss_sum) / seen,
        "train_acc": float(correct_sum) / seen,
        "clean_acc": None,
        "noisy_acc": None,
      }
      if ev is not None:
        variables = nnx.merge_state(params, rest)
        entry["clean_acc"], entry["noisy_acc"] = evaluate(
          eval_fn,
          variables,
          ev[0],
          ev[1],
          jax.random.fold_in(eval_key, epoch),
          config.eval_batch_size,
        )
      if strategies:
        entry["kept_fraction"] = float(np.mean(weights > 0))
      if batch_sigma is not None:
        entry.update(batch_sigma.summary(sigma_state))
      entry.update({k: float(v) / steps_per_epoch for k, v in diag_sum.items()})
      entry["seconds"] = time.perf_counter() - t0
      history.append(entry)
      if ckpt is not None and workdir is not None:  # (one is set with the other)
        ckpt.save(
          epoch + 1,
          items=state_items(params, rest, opt_state, weights, sigma_state),
          meta={
            "epoch": epoch + 1,
            "config": config.to_json(),
            "data": data_info,
            "key": key_data,
            "history": history,
          },
        )
        write_json(os.path.join(workdir, HISTORY_FILE), history)
      if progress:
        msg = (
          f"epoch {epoch + 1}/{config.epochs}  lr {entry['lr']:.4g}  loss {entry['train_loss']:.4f}"
          f"  train acc {entry['train_acc']:.4f}"
        )
        if ev is not None:
          msg += f"  clean acc {entry['clean_acc']:.4f}  noisy acc {entry['noisy_acc']:.4f}"
        if strategies:
          msg += f"  kept {entry['kept_fraction']:.3f}"
        if batch_sigma is not None:
          msg += "".join(f"  {k} {v:.4g}" for k, v in batch_sigma.summary(sigma_state).items())
        tqdm.write(msg + f"  ({entry['seconds']:.1f} s)")
      if on_epoch_end is not None:
        on_epoch_end(entry)
  finally:
    if ckpt is not None:
      ckpt.close()
  nnx.update(model, params, rest)
  if return_state:
    return model, history, jax.device_get(sigma_state)
  return model, history
