"""UCAN training with anisotropic noise (Hong et al., seed 000 §3.3) on the generic trainer.

The classifier and its noise-parameter generator form one NNX model
(:class:`UCANModel`: ``model(x)`` is the classifier, ``model.noise(x, lam)`` the
generator's ``(mu, sigma)``), trained by :func:`rsjax.training.train` with the
objective :class:`UCANLoss`: noise ``mu + lam * sigma * eps`` (``eps`` standard
Gaussian, ``lam`` the base scale lambda = ``TrainConfig.sigma``), loss
``sum_{j<draws} CE(f(x + noise_j), y) - weight * draws * min|sigma|``. The
generators:

* ``pattern-l1|pattern-l2|pattern-linf``: the fixed map ``P`` of
  :func:`rsjax.ucan.pattern_sigma` (coordinates normalized to [-1, 1]),
  ``mu = 0`` (no sigma term: nothing to train in the noise).
* ``universal`` (dataset-wise): free ``mu = tanh(a)``, ``sigma = |tanh(b)| * 2``
  (:class:`rsjax.ucan.UniversalNoise`, initialized at ``mu = 0``,
  ``sigma = 1``).
* ``input`` (certification-wise): two CNNs (conv3x3 c->16, a dense block of four
  conv3x3 with growth 16 and LeakyReLU 0.2, conv3x3 80->16, conv3x3 16->c, tanh);
  ``mu = lam * G1(x)``, ``sigma = |G2(x + mu)|``.

Every trained generator is a sigma source (``rsjax.noise.sigma``),
``UCANModel.noise_source(lam)``, which :func:`rsjax.ucan.certify` takes.
After training, the noise of the input-independent generators is **frozen**:
``rsjax.ucan.FrozenNoise(lam * sigma, mu)`` (rate 0), saved in the workdir
(``ucan_noise.npz``, read by :func:`load_noise`; the universal one also for
``rsjax certify --method ucan --ucan-sigma dataset``): a sound certificate of
that fixed smoothed classifier. The input generator's source is an
``rsjax.ucan.InputDependentNoise`` (rate inf).

The input-dependent generator gives no certificate: the classifier deployed at
``x + delta`` smooths with ``mu(x + delta), sigma(x + delta)``, not with the
noise the region around ``x`` was computed for (UCAN's reviewers, citing DDRS,
ANCER and IDRS). Training it needs ``allow_unsound=True`` (CLI
``--allow-unsound``), and so does ``rsjax.ucan.certify_input_dependent``, whose result is
marked ``sound=False``. The sound alternative offered and measured
(``experiments/ucan_mnist.py``) is the **frozen dataset-wise noise**
(``universal``): it certifies a fixed smoothed classifier for every input and
any order. The other candidate, the DDRS memory applied to the inscribed ball
``min sigma(x) * R``, only guarantees consistency within one deployment run and
one input order (DDRS §3.5), a weaker statement, so it was not chosen.

All start from the given model (UCAN fine-tunes a Gaussian-trained one) and use
SGD with momentum 0.9, weight decay 1e-4 and a constant learning rate (the
authors' schedulers are never stepped). Deviation: the noise parameters step on
every batch with the classifier (the authors accumulate 20 batches for the
universal generator). Workdir: ``config.json``, ``history.json`` and
``checkpoints/`` of the classifier (``rsjax.models.load_model`` reads it),
``ucan_noise.npz``, and ``ucan_train/``: the trainer's resumable run of the
classifier with its generator.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
import optax
from flax import nnx

from rsjax import models, ucan
from rsjax.records.io import write_json
from rsjax.training.config import TrainConfig
from rsjax.training.job import TrainJob
from rsjax.training.objectives import Objective
from rsjax.training.trainer import HISTORY_FILE, train
from rsjax.ucan import GENERATORS, NOISE_FILE, SOUND_GENERATORS, load_noise, save_noise
from rsjax.util import as_key, check_int

if TYPE_CHECKING:
  from jax.typing import ArrayLike

  from rsjax.util import KeyLike

__all__ = [
  "TRAIN_DIR",
  "UCANConfig",
  "UCANLoss",
  "UCANModel",
  "make_generator",
  "train_job",
  "train_ucan",
  "load_ucan_model",
]

#: Subdirectory of the workdir with the trainer's run (classifier + generator).
TRAIN_DIR = "ucan_train"
_UNIVERSAL_SCALE = 2.0

_UNSOUND = (
  "generator 'input' (UCAN's input-dependent CNN generator) is not sound: the noise at "
  "x + delta differs from the noise at x, so its radii are no certificate; pass "
  "allow_unsound=True (CLI --allow-unsound) to run it anyway, or use the sound "
  "dataset-wise 'universal' generator"
)


class _Frozen(nnx.Variable):
  """A fixed array of a generator (not an ``nnx.Param``: never trained)."""


class PatternNoise(nnx.Module):
  """UCAN's fixed pattern map: ``mu = 0``, ``sigma = P``."""

  def __init__(self, input_shape, pattern: str):
    self.shape = tuple(int(s) for s in input_shape)
    self.map = _Frozen(jnp.asarray(ucan.pattern_sigma(input_shape, pattern=pattern)))

  def __call__(self, x, lam):
    return jnp.zeros_like(x), jnp.broadcast_to(self.map[...], x.shape)


class UniversalGenerator(nnx.Module):
  """Dataset-wise ``(mu, sigma)``: free vectors through tanh (``ucan.UniversalNoise``)."""

  def __init__(self, input_shape, *, scale: float = _UNIVERSAL_SCALE, sigma0: float = 1.0):
    self.shape, self.scale = tuple(int(s) for s in input_shape), float(scale)
    p = ucan.UniversalNoise(input_shape=self.shape, scale=self.scale).init(sigma0=sigma0)
    self.a, self.b = nnx.Param(p["a"]), nnx.Param(p["b"])

  def __call__(self, x, lam):
    noise = ucan.UniversalNoise(input_shape=self.shape, scale=self.scale)
    mu, sigma = noise({"a": self.a[...], "b": self.b[...]})
    return jnp.broadcast_to(mu, x.shape), jnp.broadcast_to(sigma, x.shape)


class _NoiseCNN(nnx.Module):
  """UCAN's ``NoiseGenerator`` CNN: c -> 16, dense block (4 x growth 16), 80 -> 16 -> c, tanh."""

  def __init__(self, channels: int, *, rngs: nnx.Rngs, width: int = 16, growth: int = 16):
    conv = lambda i, o: nnx.Conv(i, o, (3, 3), padding="SAME", rngs=rngs)  # noqa: E731
    self.stem = conv(channels, width)
    self.block = nnx.List([conv(width + k * growth, growth) for k in range(4)])
    self.fuse = conv(width + 4 * growth, width)
    self.head = conv(width, channels)

  def __call__(self, x):
    h = self.stem(x)
    for layer in self.block:
      h = jnp.concatenate([h, jax.nn.leaky_relu(layer(h), 0.2)], axis=-1)
    return jnp.tanh(self.head(self.fuse(h)))


class InputGenerator(nnx.Module):
  """Certification-wise ``mu = lam * G1(x)``, ``sigma = |G2(x + mu)|`` (unsound)."""

  def __init__(self, channels: int, *, rngs: nnx.Rngs):
    self.g_mu = _NoiseCNN(channels, rngs=rngs)
    self.g_sigma = _NoiseCNN(channels, rngs=rngs)

  def __call__(self, x, lam):
    mu = lam * self.g_mu(x)
    return mu, jnp.abs(self.g_sigma(x + mu))


def make_generator(
  generator: str, input_shape: Sequence[int], *, rngs: int | jax.Array = 0
) -> nnx.Module:
  """The noise generator called ``generator`` (one of ``GENERATORS``) for ``input_shape``.

  ``rngs`` (an int seed or ``jax.random.key``) initializes the input generator's CNNs.
  """
  if generator not in GENERATORS:
    raise ValueError(f"generator must be one of {GENERATORS}, got {generator!r}")
  if generator == "universal":
    return UniversalGenerator(input_shape)
  if generator == "input":
    return InputGenerator(int(input_shape[-1]), rngs=nnx.Rngs(rngs))
  return PatternNoise(input_shape, generator.split("-")[1])


class UCANModel(nnx.Module):
  """A classifier with its noise generator: ``model(x)`` classifies, ``model.noise(x, lam)``
  returns ``(mu, sigma)``, each ``[B, *input_shape]`` (the noise is ``mu + lam * sigma * eps``)."""

  def __init__(self, classifier: nnx.Module, generator: nnx.Module):
    self.classifier, self.generator = classifier, generator

  def __call__(self, x):
    return self.classifier(x)

  def noise(self, x: jax.Array, lam: ArrayLike) -> tuple[jax.Array, jax.Array]:
    return self.generator(x, lam)

  def noise_source(self, lam: float) -> ucan.FrozenNoise | ucan.InputDependentNoise:
    """The deployed noise ``mu + lam * sigma * eps`` as a sigma source (``rsjax.noise.sigma``).

    Returns:
      ``rsjax.ucan.FrozenNoise(lam * sigma, mu)`` (rate 0) for the
      input-independent generators, ``rsjax.ucan.InputDependentNoise``
      (rate inf, no certificate) for the input generator.
    """
    lam32 = np.float32(lam)
    if isinstance(self.generator, InputGenerator):

      def fn(x):
        mu, scale = self.noise(jnp.asarray(x, jnp.float32), jnp.float32(lam))
        return np.asarray(mu), np.asarray(scale) * lam32

      return ucan.InputDependentNoise(fn)
    m, s = self.noise(jnp.zeros((1, *self.generator.shape), jnp.float32), jnp.float32(lam))
    return ucan.FrozenNoise(np.asarray(s[0], np.float32) * lam32, mu=np.asarray(m[0], np.float32))


@dataclasses.dataclass(frozen=True)
class UCANLoss(Objective):
  """UCAN's loss on a :class:`UCANModel` (``sigma`` of the trainer is lambda).

  ``sum_j CE(f(x + mu + lam * sigma * eps_j), y) - weight * draws * min|sigma|``
  (CE averaged over the batch, summed over the draws; the min over the batch's
  sigma, as the authors' ``--IsoMeasure`` target for the isotropic radius).

  Attributes:
    num_noise: draws per input (UCAN 5).
    weight: factor on the sigma term (UCAN 5; 0 for the fixed patterns).
  """

  name: ClassVar[str] = "ucan"
  num_noise: int = 5
  weight: float = 5.0

  def __call__(self, key, apply_fn, params, x, y, *, sigma, epoch=0, eval_fn=None):
    m, b = self.num_noise, x.shape[0]
    mu, scale = apply_fn(params, x, sigma, method="noise")
    eps = sigma * jax.random.normal(key, (m, *x.shape), x.dtype)
    logits = apply_fn(params, (x + mu + eps * scale).reshape(m * b, *x.shape[1:]))
    yr = jnp.tile(y, m)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), yr)
    loss = m * jnp.mean(ce) - self.weight * m * jnp.min(jnp.abs(scale))
    correct = jnp.sum(jnp.argmax(logits, axis=-1) == yr).astype(jnp.float32) / m
    return loss, {"correct": correct}


@dataclasses.dataclass(frozen=True)
class UCANConfig:
  """What :func:`train_ucan` trains (SGD, momentum 0.9, weight decay 1e-4, constant lr).

  Attributes:
    generator: one of ``GENERATORS``.
    sigma: base noise scale lambda (Gaussian std).
    epochs: passes over the training data.
    batch_size: examples per step.
    lr: learning rate.
    draws: noise draws per example and step (UCAN 5).
    weight: factor on ``min|sigma|`` (universal and input; UCAN 5).
  """

  generator: str
  sigma: float
  epochs: int = 5
  batch_size: int = 128
  lr: float = 1e-3
  draws: int = 5
  weight: float = 5.0

  def __post_init__(self):
    if self.generator not in GENERATORS:
      raise ValueError(f"generator must be one of {GENERATORS}, got {self.generator!r}")
    if not (np.isfinite(self.sigma) and self.sigma > 0):
      raise ValueError(f"sigma must be > 0, got {self.sigma!r}")
    for name in ("epochs", "batch_size", "draws"):
      object.__setattr__(self, name, check_int(name, getattr(self, name)))


def _finished(workdir) -> dict | None:
  try:
    cfg = models.read_config(workdir)
  except FileNotFoundError:
    return None
  ckpt = os.path.join(os.fspath(workdir), models.CHECKPOINT_DIR)
  return cfg if cfg.get("method") == "ucan" and os.path.isdir(ckpt) else None


def load_ucan_model(
  workdir: str | os.PathLike, *, allow_unsound: bool = False
) -> tuple[UCANModel, dict]:
  """The trained classifier with its generator (``model.noise``) from a UCAN workdir.

  Raises:
    ValueError: an input-dependent generator without ``allow_unsound``.
  """
  cfg = _finished(workdir)
  if cfg is None:
    raise FileNotFoundError(f"{os.fspath(workdir)!r} holds no finished UCAN training")
  gen = cfg["ucan"]["generator"]
  if gen not in SOUND_GENERATORS and not allow_unsound:
    raise ValueError(_UNSOUND)
  classifier, _ = models.load_model(workdir)
  return _restore_generator(workdir, classifier, gen, tuple(cfg["input_shape"])), cfg


def _restore_generator(workdir, classifier, generator: str, shape) -> UCANModel:
  """``classifier`` with its trained generator (and weights) from the workdir's ``TRAIN_DIR``."""
  model = UCANModel(classifier, make_generator(generator, shape))
  models.restore_model(os.path.join(os.fspath(workdir), TRAIN_DIR), model)
  return model


def train_ucan(
  key: KeyLike,
  model: nnx.Module,
  train_data: Sequence[npt.ArrayLike],
  config: UCANConfig,
  *,
  workdir: str | os.PathLike | None = None,
  model_config: Mapping | None = None,
  progress: bool = True,
  allow_unsound: bool = False,
) -> tuple[nnx.Module, ucan.FrozenNoise | ucan.InputDependentNoise, list[dict]]:
  """Fine-tunes ``model`` with a UCAN noise generator; returns ``(model, noise, history)``.

  Args:
    key: ``jax.random.key`` or int seed (as :func:`rsjax.training.train`; the
      input generator's initialization from ``fold_in(key, 5)``).
    model: NNX classifier on ``[b, *input_shape]`` in [0, 1]; updated in place.
    train_data: ``(x [N, ...], y [N])``.
    config: the :class:`UCANConfig` (generator, lambda, SGD settings).
    workdir: optional directory (see the module docstring). An unfinished run
      resumes from its last epoch (``ucan_train/``); a finished workdir is loaded
      instead of retrained (same generator required).
    model_config: JSON description of the classifier (needed with a workdir to
      reload it).
    progress: progress bar.
    allow_unsound: required for ``generator="input"`` (no certificate).

  Returns:
    ``(model, noise, history)``: ``noise`` is the trained generator's sigma
    source (``UCANModel.noise_source``): ``rsjax.ucan.FrozenNoise`` with
    ``mu``, ``sigma`` ``[*input_shape]`` (sigma is the per-pixel standard
    deviation of the deployed noise, lambda folded in) for the
    input-independent generators, ``InputDependentNoise`` (rate inf) for
    ``"input"``.
  """
  generator, sigma = config.generator, config.sigma
  if generator not in SOUND_GENERATORS and not allow_unsound:
    raise ValueError(_UNSOUND)
  shape = tuple(np.shape(train_data[0])[1:])
  if workdir is not None and _finished(workdir) is not None:
    done = _finished(workdir)
    if done["ucan"]["generator"] != generator:
      raise ValueError(
        f"workdir {os.fspath(workdir)!r} holds a {done['ucan']['generator']!r} "
        f"model, not {generator!r}"
      )
    model, meta = models.restore_model(workdir, model)
    if generator in SOUND_GENERATORS:
      return model, load_noise(workdir), list(meta["history"])
    noise = _restore_generator(workdir, model, generator, shape).noise_source(sigma)
    return model, noise, list(meta["history"])
  key = as_key(key)
  wrapped = UCANModel(model, make_generator(generator, shape, rngs=jax.random.fold_in(key, 5)))
  loss = UCANLoss(
    num_noise=config.draws, weight=0.0 if generator.startswith("pattern") else config.weight
  )
  train_config = TrainConfig(
    sigma=float(sigma),
    epochs=config.epochs,
    batch_size=config.batch_size,
    lr=config.lr,
    momentum=0.9,
    weight_decay=1e-4,
    lr_step=1,
    gamma=1.0,  # constant lr
    objective=loss,
  )
  train_dir = None if workdir is None else os.path.join(os.fspath(workdir), TRAIN_DIR)
  ucan_cfg = {k: v for k, v in dataclasses.asdict(config).items() if k != "sigma"}
  wrapped, history = train(
    key,
    wrapped,
    train_data,
    train_config,
    workdir=train_dir,
    model_config={**(model_config or {}), "ucan": ucan_cfg},
    progress=progress,
  )
  model = wrapped.classifier
  noise = wrapped.noise_source(sigma)  # frozen (mu, lambda * sigma) unless input-dependent
  if workdir is not None:
    workdir = os.fspath(workdir)
    if generator in SOUND_GENERATORS:  # the universal one is also the CLI's dataset-wise noise
      save_noise(workdir, noise, generator)
    cfg = {
      **(model_config or {}),
      "sigma": float(sigma),
      "method": "ucan",
      "ucan": ucan_cfg,
      "sound": generator in SOUND_GENERATORS,
    }
    write_json(os.path.join(workdir, HISTORY_FILE), history)
    meta = {"epoch": int(config.epochs), "history": history}
    models.write_checkpointed(
      workdir, models.CONFIG_FILE, model, cfg, step=meta["epoch"], meta=meta
    )
  return model, noise, history


def train_job(
  job: TrainJob, *, generator: str | None, init: str | None, ucan_draws: int, allow_unsound: bool
) -> str:
  """``rsjax train --method ucan``: :func:`train_ucan` of ``job`` (its sigma is lambda),
  fine-tuning the model of the directory ``init`` if given, with the method's training
  options (``rsjax.ucan.METHOD.training``); the closing line."""
  if generator is None:
    raise ValueError(f"UCAN training needs a generator: {' | '.join(GENERATORS)}")
  if allow_unsound and generator != "input":
    raise ValueError("allow_unsound=True (CLI --allow-unsound) is for the 'input' generator only")
  model = job.model if init is None else models.load_model(init)[0]
  c = job.config
  config = UCANConfig(generator, c.sigma, c.epochs, c.batch_size, c.lr, draws=ucan_draws)
  _, noise, _ = train_ucan(
    job.key,
    model,
    job.train_data,
    config,
    workdir=job.workdir,
    model_config=job.model_config,
    progress=job.progress,
    allow_unsound=allow_unsound,
  )
  name = job.model_config["model"]
  if generator not in SOUND_GENERATORS:
    return (
      f"trained {name} with UCAN's input-dependent generator (lambda={c.sigma}) in "
      f"{job.workdir}: NOT SOUND, its radii are no certificate "
      "(rsjax.ucan.certify_input_dependent with allow_unsound=True computes them); the sound "
      "alternative is the 'universal' generator"
    )
  return (
    f"trained {name} with UCAN {generator} noise (lambda={c.sigma}): sigma in "
    f"[{noise.sigma.min():.4f}, {noise.sigma.max():.4f}], mean |mu| "
    f"{abs(noise.mu).mean():.4f}, frozen in {os.path.join(job.workdir, NOISE_FILE)}"
  )
