"""UCAN training with input-independent anisotropic noise (Hong et al., seed 000 §3.3).

Two of the paper's three noise-parameter generators, both input-independent (so
the certificate of ``rsjax.anisotropic.certify`` is sound for the deployed
classifier):

* ``pattern-l1|pattern-l2|pattern-linf``: the fixed map ``P`` of
  :func:`rsjax.anisotropic.pattern_sigma` (coordinates normalized to [-1, 1]);
  noise ``lambda * P * eps``, loss ``sum_{j<draws} CE(f(x + noise_j), y)``.
* ``universal`` (dataset-wise): free ``mu = tanh(a)``, ``sigma = |tanh(b)| * 2``
  (:class:`rsjax.anisotropic.UniversalNoise`, initialized at ``mu = 0``,
  ``sigma = 1``), noise ``mu + lambda * sigma * eps``, loss
  :func:`rsjax.anisotropic.universal_loss` (``- weight * draws * min|sigma|``).
  After training ``(mu, lambda * sigma)`` are **frozen** and saved in the workdir
  (``ucan_noise.npz``); certification reads them from there.

Both start from the given model (UCAN fine-tunes a Gaussian-trained one) and use
SGD with momentum 0.9, weight decay 1e-4 and a constant learning rate (the
authors' schedulers are never stepped). Deviation: the noise parameters step on
every batch with the classifier (the authors accumulate 20 batches).

The input-dependent (certification-wise) CNN generators are not implemented: their
certificate is not sound (``rsjax.anisotropic.certify`` refuses it without
``allow_unsound``).
"""

from __future__ import annotations

import functools
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from tqdm.auto import tqdm

from rsjax import anisotropic
from rsjax._sampling import as_key
from rsjax.training import workdir as wd

__all__ = ["GENERATORS", "NOISE_FILE", "train_ucan", "load_noise"]

GENERATORS = ("pattern-l1", "pattern-l2", "pattern-linf", "universal")
#: The frozen ``mu`` and per-pixel ``sigma`` (lambda folded in) of a trained model.
NOISE_FILE = "ucan_noise.npz"
_UNIVERSAL_SCALE = 2.0


def load_noise(workdir) -> tuple[np.ndarray, np.ndarray, str]:
  """``(mu, sigma, generator)`` frozen after UCAN training (sigma includes lambda)."""
  path = os.path.join(os.fspath(workdir), NOISE_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no {NOISE_FILE} in {os.fspath(workdir)!r}: train with a UCAN "
                            "generator first")
  with np.load(path) as f:
    return f["mu"], f["sigma"], str(f["generator"])


@functools.partial(jax.jit, static_argnames=("graphdef", "noise_def", "draws", "tx"))
def _step(params, rest, noise_params, opt_state, x, y, key, lam, pattern, weight, *, graphdef,
          noise_def, draws, tx):
  eps = lam * jax.random.normal(key, (draws, *x.shape), x.dtype)

  def loss_fn(p, r, npar):
    model = nnx.merge(graphdef, p, r, copy=True)
    if noise_def is None:
      mu, sigma = jnp.zeros(x.shape[1:]), pattern
    else:
      mu, sigma = noise_def(npar)
    loss = anisotropic.universal_loss(lambda z: model(z).astype(jnp.float32), x, y, eps, mu=mu,
                                      sigma=sigma, weight=0.0 if noise_def is None else weight)
    return loss, nnx.state(model, nnx.Not(nnx.Param))

  (loss, new_rest), grads = jax.value_and_grad(loss_fn, argnums=(0, 2), has_aux=True)(
      params, rest, noise_params)
  updates, opt_state = tx.update(grads, opt_state, (params, noise_params))
  params, noise_params = optax.apply_updates((params, noise_params), updates)
  return params, new_rest, noise_params, opt_state, loss


def train_ucan(key, model: nnx.Module, train_data, *, generator: str, sigma: float,
               epochs: int = 5, batch_size: int = 128, lr: float = 1e-3, draws: int = 5,
               weight: float = 5.0, workdir=None, model_config=None, progress: bool = True):
  """Fine-tunes ``model`` with a UCAN noise generator; returns ``(model, mu, sigma, history)``.

  Args:
    key: ``jax.random.key`` or int seed (shuffle of epoch e from
      ``fold_in(fold_in(key, 0), e)``, noise of step t from ``fold_in(fold_in(key, 1), t)``).
    model: NNX classifier on ``[b, *input_shape]`` in [0, 1]; updated in place.
    train_data: ``(x [N, ...], y [N])``.
    generator: one of ``GENERATORS``.
    sigma: base noise scale lambda (Gaussian std).
    epochs, batch_size, lr: SGD (momentum 0.9, weight decay 1e-4, constant lr).
    draws: noise draws per example and step (UCAN 5).
    weight: factor on ``min|sigma|`` (universal; UCAN 5).
    workdir: optional directory: ``config.json``, ``history.json``, the model
      checkpoint (loadable with ``rsjax.training.load_model``) and
      ``ucan_noise.npz`` (the frozen ``mu`` and ``sigma``), written at the end. A
      finished workdir is loaded instead of retrained (same generator required);
      an unfinished one is retrained from the start.
    model_config: JSON description of the model.
    progress: progress bar.

  Returns:
    ``(model, mu [*input_shape], sigma [*input_shape], history)``; ``sigma`` is
    the per-pixel standard deviation of the deployed noise (lambda folded in).
  """
  from rsjax.checkpoint import Checkpoints
  from rsjax.models import to_train_fn

  if generator not in GENERATORS:
    raise ValueError(f"generator must be one of {GENERATORS}, got {generator!r} (the "
                     "input-dependent generator is not available: its certificate is not sound)")
  if not (np.isfinite(sigma) and sigma > 0):
    raise ValueError(f"sigma must be > 0, got {sigma!r}")
  if workdir is not None and os.path.exists(os.path.join(os.fspath(workdir), NOISE_FILE)):
    mu, sig, gen = load_noise(workdir)
    if gen != generator:
      raise ValueError(f"workdir {os.fspath(workdir)!r} holds a {gen!r} model, not {generator!r}")
    model, meta = wd.restore_model(workdir, model)
    return model, mu, sig, list(meta["history"])
  key = as_key(key)
  x, y = (np.asarray(a) for a in train_data)
  x, y = x.astype(np.float32), y.astype(np.int32)
  shape = x.shape[1:]
  if generator == "universal":
    noise_def = anisotropic.UniversalNoise(input_shape=tuple(shape), scale=_UNIVERSAL_SCALE)
    noise_params = noise_def.init(mu0=0.0, sigma0=1.0)
    pattern = jnp.ones(shape, jnp.float32)
  else:
    noise_def, noise_params = None, {"unused": jnp.zeros(())}
    pattern = jnp.asarray(anisotropic.pattern_sigma(shape, pattern=generator.split("-")[1]))
  train_fn, params, rest = to_train_fn(model)
  tx = optax.chain(optax.add_decayed_weights(1e-4), optax.sgd(lr, momentum=0.9))
  opt_state = tx.init((params, noise_params))
  n = x.shape[0]
  steps = -(-n // batch_size)
  history = []
  t = 0
  for epoch in range(epochs):
    t0 = time.perf_counter()
    perm = np.asarray(jax.random.permutation(jax.random.fold_in(jax.random.fold_in(key, 0), epoch),
                                             n))
    total = 0.0
    for b in tqdm(range(steps), desc=f"ucan {generator} {epoch + 1}/{epochs}", leave=False,
                  disable=not progress):
      idx = perm[b * batch_size:(b + 1) * batch_size]
      params, rest, noise_params, opt_state, loss = _step(
          params, rest, noise_params, opt_state, x[idx], y[idx],
          jax.random.fold_in(jax.random.fold_in(key, 1), t), np.float32(sigma), pattern,
          np.float32(weight), graphdef=train_fn.graphdef, noise_def=noise_def, draws=draws, tx=tx)
      total += float(loss) * idx.shape[0]
      t += 1
    if not np.isfinite(total):
      raise FloatingPointError(f"UCAN training loss became non-finite in epoch {epoch + 1}")
    history.append({"epoch": epoch + 1, "train_loss": total / n,
                    "seconds": time.perf_counter() - t0})
  if noise_def is None:
    mu, sig = np.zeros(shape, np.float32), np.asarray(pattern) * np.float32(sigma)
  else:
    m, s = noise_def(noise_params)
    mu, sig = np.asarray(m, np.float32), np.asarray(s, np.float32) * np.float32(sigma)
  nnx.update(model, params, rest)
  if workdir is not None:
    workdir = os.fspath(workdir)
    os.makedirs(workdir, exist_ok=True)
    cfg = dict(model_config or {})
    cfg.update(sigma=float(sigma), method="ucan",
               ucan={"generator": generator, "epochs": epochs, "batch_size": batch_size,
                     "lr": lr, "draws": draws, "weight": weight})
    wd.write_json(os.path.join(workdir, wd.CONFIG_FILE), cfg)
    wd.write_json(os.path.join(workdir, wd.HISTORY_FILE), history)
    with Checkpoints(os.path.join(workdir, wd.CHECKPOINT_DIR), max_to_keep=1) as ckpt:
      ckpt.save(epochs, items={"model": {"params": params, "rest": rest}},
                meta={"epoch": epochs, "history": history})
    if generator == "universal":  # read by ``rsjax certify --method ucan --ucan-sigma dataset``
      from rsjax import methods
      methods.save_universal_noise(workdir, mu=mu, sigma=sig)
    np.savez(os.path.join(workdir, NOISE_FILE), mu=mu, sigma=sig, generator=generator)
  return model, mu, sig, history
