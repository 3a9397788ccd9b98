"""DDRS training with data-dependent sigma (Alfarra et al., UAI 2022, Algorithm 2).

A per-example sigma memory ``[N]`` lives on device, initialized to ``sigma0``
and carried across epochs. Each step, for the batch's examples:

1. ``sigma_b <- OptimizeSigma(model, x_b, sigma_mem[idx])`` (``sigma_steps``
   ascent steps with ``sigma_draws`` noise draws each: :func:`rsjax.ddrs.sigma_ascent`,
   the classifier frozen and in eval mode);
2. ``sigma_mem[idx] <- sigma_b``;
3. one SGD step of Gaussian-noise training with per-example noise
   ``sigma_b[i] * z`` (cross-entropy, as :func:`rsjax.training.train`).

All three are one jit-compiled step. The training objective is Gaussian
augmentation only: MACER (the DDRS CIFAR script) is not available in rsjax's
trainer yet. Differences from the reference scripts: the sigma ascent runs with
the model in eval mode (``train_macer.py`` leaves it in train mode, so BatchNorm
statistics update during the ascent); ``warmup_epochs`` epochs first train at
the fixed ``sigma0`` (the paper's CIFAR schedule: 50 of 200 epochs).

Randomness: the shuffle of epoch e from ``fold_in(fold_in(key, 0), e)``, the
training noise of step t from ``fold_in(fold_in(key, 1), t)``, the sigma-ascent
noise of step t from ``fold_in(fold_in(key, 3), t)`` (then per step of the ascent
and per example index). Checkpoints after every epoch hold the model, the
optimizer state and the sigma memory; a restarted run resumes exactly.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from tqdm.auto import tqdm

from rsjax import ddrs
from rsjax._sampling import as_key
from rsjax.checkpoint import Checkpoints
from rsjax.training import workdir as wd
from rsjax.training.objectives import Gaussian
from rsjax.training.trainer import TrainConfig, make_optimizer

__all__ = ["DDRSConfig", "train_ddrs", "SIGMA_FILE"]

#: The final per-example training sigma memory, ``[N]`` float32, in the workdir.
SIGMA_FILE = "ddrs_sigma_train.npy"


@dataclasses.dataclass(frozen=True)
class DDRSConfig:
  """The data-dependent sigma part of DDRS training.

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
    if self.parametrization not in ddrs.PARAMETRIZATIONS:
      raise ValueError(f"parametrization must be one of {ddrs.PARAMETRIZATIONS}, "
                       f"got {self.parametrization!r}")
    lo, hi = self.clip
    if not 0 < lo < hi < 1:
      raise ValueError(f"clip must satisfy 0 < lo < hi < 1, got {self.clip!r}")
    if not (math.isfinite(self.sigma_min) and 0 < self.sigma_min <= self.sigma0):
      raise ValueError(f"sigma_min must lie in (0, sigma0], got {self.sigma_min!r}")

  def to_json(self) -> dict:
    d = dataclasses.asdict(self)
    d["clip"] = list(self.clip)
    return d


@functools.partial(jax.jit, static_argnames=("graphdef", "eval_graphdef", "spec",
                                             "steps_per_epoch", "sigma_steps", "sigma_draws",
                                             "parametrization"))
def _ddrs_step(params, rest, opt_state, sig_mem, x, y, idx, key, sig_key, sig_lr, lo, hi,
               sigma_min, *, graphdef, eval_graphdef, spec, steps_per_epoch, sigma_steps,
               sigma_draws, parametrization):
  """OptimizeSigma on the batch, write the memory, one SGD step at per-example sigma."""
  sig_b = sig_mem[idx]
  if sigma_steps > 0:
    eval_apply = functools.partial(_eval_apply, eval_graphdef)
    sig_b = ddrs.sigma_ascent(sig_key, eval_apply, nnx.merge_state(params, rest), x, sig_b, idx,
                              lr=sig_lr, steps=sigma_steps, num_samples=sigma_draws, lo=lo, hi=hi,
                              sigma_min=sigma_min, parametrization=parametrization)
  sig_mem = sig_mem.at[idx].set(sig_b)
  tx = make_optimizer(spec, steps_per_epoch)
  noise = sig_b.reshape((-1,) + (1,) * (x.ndim - 1)) * jax.random.normal(key, x.shape, x.dtype)

  def loss_fn(p, r):
    model = nnx.merge(graphdef, p, r, copy=True)
    logits = model(x + noise).astype(jnp.float32)
    new_rest = nnx.state(model, nnx.Not(nnx.Param))
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), (new_rest, logits)

  (loss, (new_rest, logits)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, rest)
  updates, opt_state = tx.update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)
  correct = jnp.sum(jnp.argmax(logits, axis=-1) == y)
  return params, new_rest, opt_state, sig_mem, loss * x.shape[0], correct


def _eval_apply(eval_graphdef, variables, x):
  return eval_graphdef(variables, x)


def train_ddrs(key, model: nnx.Module, train_data, *, ddrs_config: DDRSConfig,
               train_config: TrainConfig | None = None, eval_data=None, workdir=None,
               resume: bool = True, model_config=None, keep_checkpoints: int = 2,
               progress: bool = True):
  """Trains an NNX classifier with DDRS's per-example optimized sigma (Algorithm 2).

  Args:
    key: ``jax.random.key`` or int seed.
    model: NNX model ``model(x) -> logits`` on ``[b, *input_shape]`` in [0, 1];
      updated in place.
    train_data: ``(x [N, ...] float in [0, 1], y [N] int)``.
    ddrs_config: the sigma memory settings.
    train_config: SGD settings (its ``sigma`` is ignored: the per-example sigma
      comes from the memory); default ``TrainConfig(sigma=sigma0)``.
    eval_data: optional ``(x, y)``; clean and noisy (at sigma0) accuracy per epoch.
    workdir: optional directory: ``config.json`` (with ``"ddrs"``),
      ``history.json``, checkpoints (model, optimizer, sigma memory) and
      ``ddrs_sigma_train.npy`` (the final memory).
    resume: continue from the last checkpoint of ``workdir``.
    model_config: JSON description of the model (see ``rsjax.training.train``).
    keep_checkpoints: epoch checkpoints kept.
    progress: progress bar and one line per epoch.

  Returns:
    ``(model, history, sigma_memory)``: history entries as ``rsjax.training.train``
    plus ``sigma_mean``, ``sigma_std``, ``sigma_min``, ``sigma_max`` of the memory;
    ``sigma_memory`` the ``[N]`` float32 NumPy memory.
  """
  from rsjax.models import to_apply_fn, to_train_fn

  cfg = ddrs_config
  tc = train_config or TrainConfig(sigma=cfg.sigma0)
  tc = dataclasses.replace(tc, sigma=cfg.sigma0)
  if tc.objective != Gaussian() or tc.discard is not None or tc.reweigh is not None:
    raise ValueError("DDRS training uses the Gaussian objective with per-example sigma only "
                     "(train_config.objective/discard/reweigh must be left at their defaults)")
  key = as_key(key)
  x, y = _check_xy(train_data, "train_data")
  ev = _check_xy(eval_data, "eval_data") if eval_data is not None else None
  n = x.shape[0]
  steps_per_epoch = n // tc.batch_size if tc.drop_last else -(-n // tc.batch_size)
  train_fn, params, rest = to_train_fn(model)
  apply_fn, _ = to_apply_fn(model)
  tx = make_optimizer(tc, steps_per_epoch)
  opt_state = tx.init(params)
  sig_mem = jnp.full((n,), cfg.sigma0, jnp.float32)
  key_data = np.asarray(jax.random.key_data(key)).tolist()
  data_info = {"num_train": int(n), "input_shape": list(x.shape[1:])}
  saved_cfg = {"train": tc.to_json(), "ddrs": cfg.to_json()}

  def items(params, rest, opt_state, sig_mem):
    return {"model": {"params": params, "rest": rest},
            "train": {"opt_state": opt_state, "sigma_memory": sig_mem}}

  history, start_epoch, ckpt = [], 0, None
  if workdir is not None:
    workdir = os.fspath(workdir)
    os.makedirs(workdir, exist_ok=True)
    ckpt = Checkpoints(os.path.join(workdir, wd.CHECKPOINT_DIR), max_to_keep=keep_checkpoints)
    latest = ckpt.latest_step()
    if latest is not None and not resume:
      ckpt.close()
      raise ValueError(f"workdir {workdir!r} already holds checkpoints (epoch {latest}); pass "
                       "resume=True to continue, or use a new workdir")
    if latest is not None:
      restored, meta = ckpt.restore(latest, targets=items(params, rest, opt_state, sig_mem))
      if (meta["config"], meta["data"], meta["key"]) != (
          _no_epochs(saved_cfg), data_info, key_data):
        ckpt.close()
        raise ValueError("cannot resume: the DDRS/training config, data or key differs from the "
                         "checkpointed run; use the same arguments or a new workdir")
      params, rest = restored["model"]["params"], restored["model"]["rest"]
      opt_state = restored["train"]["opt_state"]
      sig_mem = restored["train"]["sigma_memory"]
      start_epoch, history = int(meta["epoch"]), list(meta["history"])
    else:
      out = dict(model_config or {})
      out.update(sigma=cfg.sigma0, method="ddrs", train=tc.to_json(), ddrs=cfg.to_json(),
                 data=data_info)
      wd.write_json(os.path.join(workdir, wd.CONFIG_FILE), out)

  device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  params, rest, opt_state, sig_mem = jax.device_put((params, rest, opt_state, sig_mem), device)
  f32 = np.float32
  step = functools.partial(
      _ddrs_step, sig_lr=f32(cfg.sigma_lr), lo=f32(cfg.clip[0]), hi=f32(cfg.clip[1]),
      sigma_min=f32(cfg.sigma_min), graphdef=train_fn.graphdef, eval_graphdef=apply_fn,
      spec=dataclasses.replace(tc, sigma=0.0, epochs=0, drop_last=False, eval_batch_size=1,
                              objective=Gaussian(), discard=None, reweigh=None),
      steps_per_epoch=steps_per_epoch, sigma_draws=cfg.sigma_draws,
      parametrization=cfg.parametrization)
  shuffle_key, noise_key, sig_key = (jax.random.fold_in(key, i) for i in (0, 1, 3))
  try:
    for epoch in range(start_epoch, tc.epochs):
      t0 = time.perf_counter()
      k_sig = 0 if epoch < cfg.warmup_epochs else cfg.sigma_steps
      perm = np.asarray(jax.random.permutation(jax.random.fold_in(shuffle_key, epoch), n))
      loss_sum = correct_sum = 0
      for b in tqdm(range(steps_per_epoch), desc=f"ddrs epoch {epoch + 1}/{tc.epochs}",
                    disable=not progress, leave=False):
        idx = perm[b * tc.batch_size:(b + 1) * tc.batch_size]
        t = epoch * steps_per_epoch + b
        params, rest, opt_state, sig_mem, loss, correct = step(
            params, rest, opt_state, sig_mem, x[idx], y[idx], idx.astype(np.int32),
            jax.random.fold_in(noise_key, t), jax.random.fold_in(sig_key, t), sigma_steps=k_sig)
        loss_sum, correct_sum = loss_sum + loss, correct_sum + correct
      loss_avg = float(loss_sum) / n
      if not math.isfinite(loss_avg):
        raise FloatingPointError(f"DDRS training loss became non-finite in epoch {epoch + 1}; "
                                 "lower lr or sigma_lr")
      s = np.asarray(sig_mem)
      entry = {"epoch": epoch + 1, "train_loss": loss_avg, "train_acc": float(correct_sum) / n,
               "sigma_mean": float(s.mean()), "sigma_std": float(s.std()),
               "sigma_min": float(s.min()), "sigma_max": float(s.max()),
               "clean_acc": None, "noisy_acc": None}
      if ev is not None:
        entry["clean_acc"], entry["noisy_acc"] = _accuracy(apply_fn, nnx.merge_state(params, rest),
                                                           ev, cfg.sigma0,
                                                           jax.random.fold_in(key, 2 + 100 * epoch))
      entry["seconds"] = time.perf_counter() - t0
      history.append(entry)
      if ckpt is not None:
        ckpt.save(epoch + 1, items=items(params, rest, opt_state, sig_mem),
                  meta={"epoch": epoch + 1, "config": _no_epochs(saved_cfg), "data": data_info,
                        "key": key_data, "history": history})
        wd.write_json(os.path.join(workdir, wd.HISTORY_FILE), history)
        np.save(os.path.join(workdir, SIGMA_FILE), s)
      if progress:
        tqdm.write(f"ddrs epoch {entry['epoch']}/{tc.epochs} loss {loss_avg:.4f} "
                   f"acc {entry['train_acc']:.4f} sigma {entry['sigma_mean']:.4f} "
                   f"+- {entry['sigma_std']:.4f} [{entry['sigma_min']:.4f}, "
                   f"{entry['sigma_max']:.4f}]")
  finally:
    if ckpt is not None:
      ckpt.close()
  nnx.update(model, params, rest)
  return model, history, np.asarray(sig_mem)


def _no_epochs(saved_cfg: dict) -> dict:
  out = {k: dict(v) for k, v in saved_cfg.items()}
  out["train"].pop("epochs", None)
  return out


def _check_xy(data, name):
  try:
    x, y = data
  except (TypeError, ValueError):
    raise ValueError(f"{name} must be a pair (x, y) of arrays") from None
  x, y = np.asarray(x, np.float32), np.asarray(y)
  if x.ndim < 2 or y.shape != (x.shape[0],) or not np.issubdtype(y.dtype, np.integer):
    raise ValueError(f"{name}: expected x [N, ...] and integer y [N], got {x.shape}, {y.shape}")
  return x, y.astype(np.int32)


@functools.partial(jax.jit, static_argnames=("apply_fn",))
def _correct(variables, x, y, key, sigma, *, apply_fn):
  clean = jnp.argmax(apply_fn(variables, x), -1) == y
  noisy = jnp.argmax(apply_fn(variables, x + sigma * jax.random.normal(key, x.shape)), -1) == y
  return jnp.sum(clean), jnp.sum(noisy)


def _accuracy(apply_fn, variables, ev, sigma, key, batch: int = 500):
  x, y = ev
  c = z = 0
  for i in range(0, x.shape[0], batch):
    a, b = _correct(variables, x[i:i + batch], y[i:i + batch], jax.random.fold_in(key, i),
                    np.float32(sigma), apply_fn=apply_fn)
    c, z = c + int(a), z + int(b)
  return c / x.shape[0], z / x.shape[0]
