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

:func:`train` is built as flax's MNIST example: a
:class:`~rsjax.training.state.TrainState` value (:mod:`rsjax.training.state`,
with the run's fixed :class:`~rsjax.training.state.TrainSetup`), the compiled
step (:func:`rsjax.training.steps.train_step`) and a plain epoch loop
(:mod:`rsjax.training.loop`); this module adds the workdir: its config,
checkpoints (:func:`checkpoint_items`, :func:`save_epoch`) and the resume
(:func:`open_workdir`, :func:`restore_state`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar, Unpack, overload

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from flax import nnx
from tqdm.auto import tqdm

from rsjax import models
from rsjax.engine.counts import as_key
from rsjax.models.checkpoint import Checkpoints
from rsjax.records.io import write_json
from rsjax.training.config import TrainConfig
from rsjax.training.inputs import check_compatible
from rsjax.training.loop import epoch_message, run_epoch
from rsjax.training.state import Keys, TrainSetup, TrainState, init_state, make_setup, place_state

if TYPE_CHECKING:
  from rsjax.util import KeyLike

__all__ = [
  "HISTORY_FILE",
  "checkpoint_items",
  "key_list",
  "open_workdir",
  "restore_state",
  "save_epoch",
  "train",
]

# The per-epoch metrics in a workdir, next to its model directory (``rsjax.models``).
HISTORY_FILE = "history.json"

_M = TypeVar("_M", bound=nnx.Module)


class TrainOptions(TypedDict, total=False):
  """The keywords of :func:`train` but ``return_state`` (its Args say what each does)."""

  eval_data: Sequence[npt.ArrayLike] | None
  workdir: str | os.PathLike | None
  resume: bool
  model_config: Mapping | None
  keep_checkpoints: int
  progress: bool
  on_epoch_end: Callable[[dict], None] | None


@overload
def train(
  key: KeyLike,
  model: _M,
  train_data: Sequence[npt.ArrayLike],
  config: TrainConfig,
  *,
  return_state: Literal[False] = False,
  **options: Unpack[TrainOptions],
) -> tuple[_M, list[dict]]: ...


@overload
def train(
  key: KeyLike,
  model: _M,
  train_data: Sequence[npt.ArrayLike],
  config: TrainConfig,
  *,
  return_state: Literal[True],
  **options: Unpack[TrainOptions],
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
  if not isinstance(config, TrainConfig):
    raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
  key = as_key(key)
  setup, params, rest = make_setup(model, train_data, config, eval_data)
  state = init_state(setup, params, rest)
  history: list[dict] = []
  ckpt = None
  if workdir is not None:
    workdir = os.fspath(workdir)
    ckpt, state, history = open_workdir(
      key,
      workdir,
      state,
      setup,
      resume=resume,
      model_config=model_config,
      keep_checkpoints=keep_checkpoints,
      progress=progress,
    )
  keys = Keys.of(key)
  try:
    state = place_state(state, setup.device)
    for _ in range(state.epoch, config.epochs):
      state, entry = run_epoch(keys, state, setup, progress=progress)
      history.append(entry)
      if ckpt is not None and workdir is not None:  # (one is set with the other)
        save_epoch(key, ckpt, workdir, state, setup, history)
      if progress:
        tqdm.write(epoch_message(entry, state, config))
      if on_epoch_end is not None:
        on_epoch_end(entry)
  finally:
    if ckpt is not None:
      ckpt.close()
  nnx.update(model, state.params, state.rest)
  if return_state:
    return model, history, jax.device_get(state.sigma_state)
  return model, history


def key_list(key: jax.Array) -> list:
  """The data of ``key`` as JSON (a checkpoint's ``meta["key"]``).

  Args:
    key: a ``jax.random.key``.
  """
  return np.asarray(jax.random.key_data(key)).tolist()


def checkpoint_items(key: jax.Array, state: TrainState, config: TrainConfig) -> dict[str, Any]:
  """The pytrees a checkpoint holds (also the targets of a restore).

  Args:
    key: the run's ``jax.random.key`` (saved as its data).
    state: the state to save (its ``weights`` only with strategies, its
      ``sigma_state`` only with a ``batch_sigma``).
    config: the training config.

  Returns:
    ``{"model": {"params", "rest"}, "train": {"opt_state", "key"[, "weights"][,
    "batch_sigma"]}}``.
  """
  train_state: dict[str, Any] = {"opt_state": state.opt_state, "key": jax.random.key_data(key)}
  if config.strategy_epoch is not None:
    train_state["weights"] = jnp.asarray(state.weights)
  if config.batch_sigma is not None:
    train_state["batch_sigma"] = state.sigma_state
  return {"model": {"params": state.params, "rest": state.rest}, "train": train_state}


def restore_state(
  key: jax.Array, ckpt: Checkpoints, epoch: int, state: TrainState, setup: TrainSetup
) -> tuple[TrainState, dict[str, Any]]:
  """The state checkpointed after ``epoch``, checked against this run.

  Args:
    key: the run's ``jax.random.key``; it must be the checkpointed run's.
    ckpt: the workdir's checkpoints.
    epoch: the checkpoint's epoch.
    state: a fresh state (the restore targets).
    setup: the run's fixed part; its config (but ``epochs``) and data must be the
      checkpointed run's.

  Returns:
    ``(state, meta)``: the restored state and the checkpoint's metadata.

  Raises:
    ValueError: the config, the data or the key differ from the checkpointed run's.
  """
  config = setup.config
  items, meta = ckpt.restore(epoch, targets=checkpoint_items(key, state, config))
  check_compatible(meta["config"], config.to_json(), "training config")
  check_compatible(meta["data"], setup.data_info, "training data")
  if meta["key"] != key_list(key):
    raise ValueError("cannot resume: key differs from the key of the checkpointed run")
  train_items = items["train"]
  start = int(meta["epoch"])
  state = TrainState(
    params=items["model"]["params"],
    rest=items["model"]["rest"],
    opt_state=train_items["opt_state"],
    # A checkpoint holds the weights and the sigma state only when the config uses them.
    weights=np.asarray(train_items.get("weights", state.weights), np.float32),
    sigma_state=train_items.get("batch_sigma", state.sigma_state),
    epoch=start,
    step=start * setup.steps_per_epoch,
  )
  return state, meta


def open_workdir(
  key: jax.Array,
  workdir: str,
  state: TrainState,
  setup: TrainSetup,
  *,
  resume: bool = True,
  model_config: Mapping | None = None,
  keep_checkpoints: int = 2,
  progress: bool = True,
) -> tuple[Checkpoints, TrainState, list[dict]]:
  """The workdir's checkpoints, and the state and history a run continues from.

  A workdir without checkpoints gets its ``config.json`` (``model_config`` with
  ``sigma``, ``train`` and ``data``) and the run starts from ``state``; one with
  checkpoints resumes after its last epoch (:func:`restore_state`).

  Args:
    key: the run's ``jax.random.key``.
    workdir: the directory (created).
    state: a fresh state.
    setup: the run's fixed part.
    resume: continue from existing checkpoints (else raise).
    model_config: the model's JSON description for ``config.json``.
    keep_checkpoints: epoch checkpoints kept.
    progress: say that the run resumes.

  Returns:
    ``(ckpt, state, history)``; the caller closes ``ckpt`` (closed here on an error).

  Raises:
    ValueError: checkpoints without ``resume``, a run that differs from the
      checkpointed one, or a reserved key in ``model_config``.
  """
  config = setup.config
  os.makedirs(workdir, exist_ok=True)
  ckpt = Checkpoints(os.path.join(workdir, models.CHECKPOINT_DIR), max_to_keep=keep_checkpoints)
  try:
    latest = ckpt.latest_step()
    if latest is not None and not resume:
      raise ValueError(
        f"workdir {workdir!r} already holds checkpoints (epoch {latest}); pass resume=True to "
        "continue, or use a new workdir"
      )
    if latest is None:
      cfg = dict(model_config or {})
      for reserved in ("sigma", "train", "data"):
        if reserved in cfg:
          raise ValueError(f"model_config must not contain the key {reserved!r}")
      cfg.update(sigma=config.sigma, train=config.to_json(), data=setup.data_info)
      models.write_config(workdir, cfg)
      return ckpt, state, []
    state, meta = restore_state(key, ckpt, latest, state, setup)
    cfg_path = os.path.join(workdir, models.CONFIG_FILE)
    if meta["config"].get("epochs") != config.epochs and os.path.exists(cfg_path):
      # More (or fewer) epochs than the run began with: config.json says the
      # epochs now asked for, so a reader can tell a finished run from a cut one.
      cfg = models.read_config(workdir)
      cfg["train"] = config.to_json()
      models.write_config(workdir, cfg)
    if progress:
      tqdm.write(
        f"resuming {workdir} after epoch {state.epoch} of {config.epochs} "
        "(a new workdir starts over)"
      )
  except BaseException:
    ckpt.close()
    raise
  return ckpt, state, list(meta["history"])


def save_epoch(
  key: jax.Array,
  ckpt: Checkpoints,
  workdir: str,
  state: TrainState,
  setup: TrainSetup,
  history: list[dict],
) -> None:
  """Checkpoints ``state`` as epoch ``state.epoch`` and writes the workdir's ``history.json``.

  Args:
    key: the run's ``jax.random.key``.
    ckpt: the workdir's checkpoints.
    workdir: the directory.
    state: the state after ``state.epoch`` epochs.
    setup: the run's fixed part.
    history: the entries of all epochs so far.
  """
  ckpt.save(
    state.epoch,
    items=checkpoint_items(key, state, setup.config),
    meta={
      "epoch": state.epoch,
      "config": setup.config.to_json(),
      "data": setup.data_info,
      "key": key_list(key),
      "history": history,
    },
  )
  write_json(os.path.join(workdir, HISTORY_FILE), history)
