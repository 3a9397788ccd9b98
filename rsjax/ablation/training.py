"""``rsjax train --method patch`` and ``--method ablation``: a classifier of encoded images
trained on ablated copies of the training set, a fresh ablation per example and epoch.

The classifier takes the paper's encoding (``_ablate.encode``: 2 x the channels, no
normalization layer), so the job's model is built again at that input shape (or loaded from
``--init``, which must take it); ``config.json`` states ``"input_encoding": "ablation"``, which
is how ``rsjax certify`` knows the model takes the encoded images of its dataset. Each epoch
``e`` trains on the training images ablated afresh, drawn from ``fold_in(fold_in(key, 5), e)``
(derandomized smoothing: one band or block position per example, uniform over the positions;
randomized ablation: ``keep`` pixels per example, uniform over the subsets), by the shared
trainer (``rsjax.training.train``, one epoch a call, resumed from the model directory's
checkpoint, so the schedule and the optimizer run on as in one call). The evaluation images
are ablated once (``fold_in(fold_in(key, 5), 0)``). No Gaussian noise is added (sigma 0).
With ``--drop-tokens`` a ViT trains with its ablated tokens dropped (``_dropping``), the forward
``rsjax certify --drop-tokens`` runs; its config states ``DROPPED``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import numpy as np

from rsjax import models
from rsjax.ablation import _ablate
from rsjax.training.job import TrainJob
from rsjax.training.objectives import Gaussian
from rsjax.training.trainer import train

__all__ = [
  "DROPPED",
  "ENCODED",
  "ablate_patch",
  "ablate_pixels",
  "encoded_job",
  "train_l0",
  "train_patch",
]

#: The ``input_encoding`` a model directory of an ablation method states in its config.
ENCODED = "ablation"

#: The config key of a ViT trained with its ablated tokens dropped (``--drop-tokens``).
DROPPED = "trained_with_dropped_tokens"


def _rng(key: jax.Array, epoch: int) -> np.random.Generator:
  """The host generator of epoch ``epoch``'s ablations: ``fold_in(fold_in(key, 5), epoch)``."""
  k = jax.random.fold_in(jax.random.fold_in(key, 5), epoch)
  return np.random.default_rng(np.asarray(jax.random.key_data(k)).astype(np.uint64).tolist())


def _encode(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
  """``x [N, H, W, C]`` encoded with ``keep [N, H, W]`` (host; :func:`_ablate.encode`)."""
  k = keep[..., None].astype(np.float32)
  return np.concatenate([x * k, (1.0 - x) * k], axis=-1)


def ablate_patch(x: np.ndarray, rng: np.random.Generator, ablation: str, size: int) -> np.ndarray:
  """``x [N, H, W, C]`` encoded with one random kept band or block each."""
  masks = _ablate.position_masks(x.shape[1:], ablation, size)
  return _encode(x, masks[rng.integers(0, len(masks), len(x))])


def ablate_pixels(x: np.ndarray, rng: np.random.Generator, keep: int) -> np.ndarray:
  """``x [N, H, W, C]`` encoded with ``keep`` random pixels kept each."""
  n, h, w = x.shape[:3]
  order = np.argsort(rng.random((n, h * w)), axis=1)  # a uniform permutation per image
  kept = np.zeros((n, h * w), bool)
  np.put_along_axis(kept, order[:, :keep], True, axis=1)
  return _encode(x, kept.reshape(n, h, w))


def encoded_job(job: TrainJob, init: str | None) -> TrainJob:
  """``job`` with a model of the encoded images: built fresh at ``(H, W, 2C)`` without a
  normalization layer, or loaded from ``init`` (which must take them)."""
  shape = _ablate.encoded_shape(tuple(job.model_config["input_shape"]))
  config = {
    **job.model_config,
    "input_shape": list(shape),
    "model_kwargs": {"normalize": None},
    "input_encoding": ENCODED,
  }
  if init is not None:
    model, saved = models.load_model(init)
    if saved.get("input_encoding") != ENCODED or list(saved.get("input_shape", ())) != list(shape):
      raise ValueError(f"--init {init!r} holds no model of the encoded images {list(shape)}")
    from rsjax.training.job import fine_tuned_from

    config = {**config, "model_kwargs": saved.get("model_kwargs") or {}}
    return dataclasses.replace(
      job, model=model, model_config={**config, "derived_from": fine_tuned_from(model)}
    )
  seed = int(jax.random.randint(jax.random.fold_in(job.key, 6), (), 0, 2**31 - 1))
  model = models.create_model(
    config["model"], num_classes=int(config["num_classes"]), input_shape=shape, normalize=None,
    rngs=seed,
  )  # fmt: skip
  return dataclasses.replace(job, model=model, model_config=config)


def _refuse(job: TrainJob) -> None:
  """The ablation trainers train on ablated images with the plain loss only."""
  c = job.config
  if c.discard is not None or c.reweigh is not None or c.batch_sigma is not None:
    raise ValueError("the ablation methods train without Sun et al.'s strategies or batch sigma")
  if not isinstance(c.objective, Gaussian) or c.objective.num_noise != 1:
    raise ValueError("the ablation methods train with the plain objective only (--objective)")


def _epochs(job: TrainJob, ablate: Callable[[np.ndarray, np.random.Generator], np.ndarray]):
  """Trains ``job`` epoch by epoch on fresh ablations; the history."""
  config = dataclasses.replace(job.config, sigma=0.0)
  x, y = job.train_data
  options = job.options()
  if job.eval_data is not None:
    ex, ey = job.eval_data
    options["eval_data"] = (ablate(np.asarray(ex, np.float32), _rng(job.key, 0)), ey)
  history: list[dict] = []
  for epoch in range(1, config.epochs + 1):
    data = (ablate(np.asarray(x, np.float32), _rng(job.key, epoch)), y)
    _, history = train(
      job.key, job.model, data, dataclasses.replace(config, epochs=epoch), **options
    )
  return history


def train_patch(
  job: TrainJob,
  ablation: str,
  ablation_size: int,
  drop_tokens: bool = False,
  init: str | None = None,
) -> str:
  """``rsjax train --method patch``: one random band or block kept per example and epoch; with
  ``drop_tokens`` a ViT sees only the kept region's tokens (``_dropping``)."""
  _refuse(job)
  job = encoded_job(job, init)
  if drop_tokens:
    job = _dropping_job(job, ablation, ablation_size)
  history = _epochs(job, lambda x, rng: ablate_patch(x, rng, ablation, ablation_size))
  what = f"on {job.model_config['dataset']} with {ablation} ablation of size {ablation_size}"
  return job.closing(history, what, "accuracy on ablated test images {noisy_acc:.4f}")


def _dropping_job(job: TrainJob, ablation: str, size: int) -> TrainJob:
  """``job`` training the ViT's twin that drops the ablated tokens; its config says so."""
  from rsjax.ablation._dropping import dropping_twin

  model = dropping_twin(job.model, ablation, size)
  return dataclasses.replace(job, model=model, model_config={**job.model_config, DROPPED: True})


def train_l0(job: TrainJob, keep: int, init: str | None = None) -> str:
  """``rsjax train --method ablation``: ``keep`` random pixels kept per example and epoch."""
  _refuse(job)
  job = encoded_job(job, init)
  history = _epochs(job, lambda x, rng: ablate_pixels(x, rng, keep))
  what = f"on {job.model_config['dataset']} keeping {keep} pixels"
  return job.closing(history, what, "accuracy on ablated test images {noisy_acc:.4f}")
