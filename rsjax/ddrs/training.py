"""DDRS training with data-dependent sigma (Alfarra et al., UAI 2022, Algorithm 2).

A per-example sigma memory ``[N]`` lives on device, initialized to ``sigma0``
and carried across epochs. Each step, for the batch's examples:

1. ``sigma_b <- OptimizeSigma(model, x_b, sigma_mem[idx])`` (``sigma_steps``
   ascent steps with ``sigma_draws`` noise draws each: :func:`rsjax.ddrs.sigma_ascent`,
   the classifier frozen and in eval mode);
2. ``sigma_mem[idx] <- sigma_b``;
3. one SGD step of the training objective with per-example sigma ``sigma_b``:
   Gaussian noise ``sigma_b[i] * z`` by default (cross-entropy), or MACER
   (``TrainConfig(objective=MACER(...))``, the DDRS CIFAR script
   ``train_macer.py``; its hinge uses the per-example sigma).

:class:`DDRSConfig` is a :class:`rsjax.training.BatchSigma`: the generic trainer
:func:`rsjax.training.train` runs the three as one jit-compiled step, keeps the
memory on device and checkpoints it with the model (a restarted run resumes
exactly); :func:`train_ddrs` is that call with the memory saved at the end.
Differences from the reference scripts: the sigma ascent runs with the model in
eval mode (``train_macer.py`` leaves it in train mode, so BatchNorm statistics
update during the ascent); ``warmup_epochs`` epochs first train at the fixed
``sigma0`` (the paper's CIFAR schedule: 50 of 200 epochs).

Randomness: as :func:`rsjax.training.train`; the sigma-ascent noise of step t
from ``fold_in(fold_in(key, 4), t)`` (then per step of the ascent and per
example index).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Unpack

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from flax import nnx

from rsjax import ddrs
from rsjax.ddrs._objective import check_choice, check_clip
from rsjax.training.config import BatchSigma, TrainConfig
from rsjax.training.job import TrainJob
from rsjax.training.trainer import TrainOptions, train

if TYPE_CHECKING:
  from jax.typing import ArrayLike

  from rsjax.util import KeyLike

__all__ = ["DDRSConfig", "SIGMA_FILE", "train_ddrs", "train_job"]

#: The final per-example training sigma memory, ``[N]`` float32, in the workdir.
SIGMA_FILE = "ddrs_sigma_train.npy"


@dataclasses.dataclass(frozen=True)
class DDRSConfig(BatchSigma):
  """The data-dependent sigma part of DDRS training (a :class:`~rsjax.training.BatchSigma`).

  Attributes:
    sigma0: initial sigma of every example (the paper's sigma0_tr).
    sigma_steps: K_tr ascent steps per batch (0: fixed-sigma training).
    sigma_lr: ascent step size (paper 1e-4).
    sigma_draws: n_ds noise draws per ascent step (paper scripts 1 or 64).
    parametrization: ``"sigma"`` (paper) or ``"log"`` (see ``rsjax.ddrs``).
    sigma_min: lower bound kept on sigma.
    clip: clamp of the soft smoothed probabilities (DDRS scripts (0.02, 0.98)).
    warmup_epochs: first epochs at the fixed sigma0.
  """

  sigma0: float
  sigma_steps: int = 1
  sigma_lr: float = 1e-4
  sigma_draws: int = 1
  parametrization: str = "sigma"
  sigma_min: float = 1e-3
  clip: tuple = (0.02, 0.98)
  warmup_epochs: int = 0

  def __post_init__(self):
    if not (math.isfinite(self.sigma0) and self.sigma0 > 0):
      raise ValueError(f"sigma0 must be > 0, got {self.sigma0!r}")
    for name, lo in (("sigma_steps", 0), ("sigma_draws", 1), ("warmup_epochs", 0)):
      v = getattr(self, name)
      if isinstance(v, bool) or int(v) != v or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    if not (math.isfinite(self.sigma_lr) and self.sigma_lr >= 0):
      raise ValueError(f"sigma_lr must be >= 0, got {self.sigma_lr!r}")
    check_choice("parametrization", self.parametrization, ddrs.PARAMETRIZATIONS)
    object.__setattr__(self, "clip", check_clip(self.clip))
    if not (math.isfinite(self.sigma_min) and 0 < self.sigma_min <= self.sigma0):
      raise ValueError(f"sigma_min must lie in (0, sigma0], got {self.sigma_min!r}")

  @property
  def ascent(self) -> ddrs.SigmaAscent:
    """The per-batch sigma ascent as a :class:`rsjax.ddrs.SigmaAscent`."""
    return ddrs.SigmaAscent(
      steps=self.sigma_steps,
      lr=self.sigma_lr,
      num_samples=self.sigma_draws,
      clip=self.clip,
      sigma_min=self.sigma_min,
      parametrization=self.parametrization,
    )

  def to_json(self) -> dict:
    return {"name": "ddrs", **dataclasses.asdict(self), "clip": list(self.clip)}

  def init(self, n: int) -> jax.Array:
    """The memory: ``[n]`` float32, all ``sigma0``."""
    return jnp.full((n,), self.sigma0, jnp.float32)

  def __call__(self, key, state, eval_fn, variables, x, idx, epoch):
    """OptimizeSigma from the memory (after the warm-up), written back: ``(memory, sigma_b)``."""
    sig = state[idx]
    if self.sigma_steps > 0:

      def ascend(s):
        return ddrs.sigma_ascent(key, eval_fn, variables, x, s, idx, config=self.ascent)

      sig = jax.lax.cond(epoch >= self.warmup_epochs, ascend, lambda s: s, sig)
    return state.at[idx].set(sig), sig

  def summary(self, state: ArrayLike) -> dict:
    """Mean, spread and range of the memory ``state`` ``[N]``."""
    s = np.asarray(state)
    return {f"sigma_{stat}": float(getattr(s, stat)()) for stat in ("mean", "std", "min", "max")}


def train_ddrs(
  key: KeyLike,
  model: nnx.Module,
  train_data: Sequence[npt.ArrayLike],
  *,
  ddrs_config: DDRSConfig,
  train_config: TrainConfig | None = None,
  **options: Unpack[TrainOptions],
) -> tuple[nnx.Module, list[dict], np.ndarray]:
  """Trains an NNX classifier with DDRS's per-example optimized sigma (Algorithm 2).

  :func:`rsjax.training.train` with ``batch_sigma=ddrs_config``.

  Args:
    key: ``jax.random.key`` or int seed.
    model: NNX model ``model(x) -> logits`` on ``[b, *input_shape]`` in [0, 1];
      updated in place.
    train_data: ``(x [N, ...] float in [0, 1], y [N] int)``.
    ddrs_config: the sigma memory settings.
    train_config: SGD settings and the objective (Gaussian by default, or
      MACER; its ``sigma`` is replaced by ``sigma0``, the level of the
      per-epoch noisy evaluation: the training sigma comes from the memory);
      default ``TrainConfig(sigma=sigma0)``. No discard/reweigh.
    **options: the keywords of :func:`rsjax.training.train` (``eval_data``: clean and
      noisy accuracy at sigma0 per epoch; ``workdir``: ``config.json`` with ``"method":
      "ddrs"`` and the DDRS settings under ``train.batch_sigma``, ``history.json``,
      checkpoints (model, optimizer, sigma memory) and ``ddrs_sigma_train.npy``, the
      final memory; ``resume``, ``model_config``, ``keep_checkpoints``, ``progress``,
      ``on_epoch_end``).

  Returns:
    ``(model, history, sigma_memory)``: history entries as ``rsjax.training.train``
    plus ``sigma_mean``, ``sigma_std``, ``sigma_min``, ``sigma_max`` of the memory;
    ``sigma_memory`` the ``[N]`` float32 NumPy memory.
  """
  if not isinstance(ddrs_config, DDRSConfig):
    raise ValueError(f"ddrs_config must be a DDRSConfig, got {type(ddrs_config).__name__}")
  tc = train_config or TrainConfig(sigma=ddrs_config.sigma0)
  tc = dataclasses.replace(tc, sigma=ddrs_config.sigma0, batch_sigma=ddrs_config)
  options["model_config"] = {**(options.get("model_config") or {}), "method": "ddrs"}
  model, history, memory = train(key, model, train_data, tc, return_state=True, **options)
  memory = np.asarray(memory, np.float32)
  workdir = options.get("workdir")
  if workdir is not None:
    np.save(os.path.join(os.fspath(workdir), SIGMA_FILE), memory)
  return model, history, memory


def train_job(
  job: TrainJob,
  *,
  sigma_steps: int,
  sigma_lr: float,
  sigma_draws: int,
  sigma_param: str,
  ddrs_warmup_epochs: int,
) -> str:
  """``rsjax train --method ddrs``: :func:`train_ddrs` of ``job`` (its sigma is sigma0) with
  the method's training options (``rsjax.ddrs.METHOD.training``); the closing line."""
  if job.config.discard is not None or job.config.reweigh is not None:
    raise ValueError("DDRS training cannot be combined with Sun et al.'s discard or reweigh")
  cfg = DDRSConfig(
    sigma0=job.config.sigma,
    sigma_steps=sigma_steps,
    sigma_lr=sigma_lr,
    sigma_draws=sigma_draws,
    parametrization=sigma_param,
    warmup_epochs=ddrs_warmup_epochs,
  )
  _, history, mem = train_ddrs(
    job.key,
    job.model,
    job.train_data,
    ddrs_config=cfg,
    train_config=job.config,
    **job.options(),
  )
  spread = f"training sigma {mem.mean():.4f} +- {mem.std():.4f}"
  return job.closing(history, f"with DDRS (sigma0={job.config.sigma})", spread)
