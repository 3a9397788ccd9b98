"""What a method's trainer gets (``rsjax train --method``): a :class:`TrainJob`, and
Cohen et al.'s trainer, :func:`train_gaussian`.

A method's training half (``rsjax.methods.Training``) names its trainer by a string
path, ``trainer(job, **options) -> str``, as its certify half names its certifier: the
command builds the job from the shared flags (model, data, schedule, objective, Sun
et al.'s strategies) and the trainer adds what its method needs (DDRS's sigma memory,
UCAN's noise generator).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from rsjax.training.config import TrainConfig
from rsjax.training.trainer import TrainOptions, train

__all__ = ["ARCHITECTURE", "TrainJob", "fine_tuned_from", "train_gaussian"]

#: The fields of ``config.json`` that build a model: a fine-tuned model keeps them.
ARCHITECTURE = ("model", "num_classes", "input_shape", "model_kwargs")


def fine_tuned_from(model: Any) -> dict[str, str]:
  """The ``derived_from`` field of a model fine-tuned from ``model``: the transform
  ``fine-tune`` and ``model``'s weight fingerprint."""
  from rsjax import models
  from rsjax.runs.runner import fingerprint

  return {"transform": "fine-tune", "init": fingerprint(models.to_apply_fn(model)[1])}


@dataclasses.dataclass(frozen=True)
class TrainJob:
  """One training run of a base classifier.

  Attributes:
    key: ``jax.random.key`` of the run (initialization is the model's own).
    model: the NNX model to train (fresh, or loaded to fine-tune).
    train_data: ``(x [n, ...], y [n])``.
    eval_data: ``(x, y)`` evaluated after each epoch, or None.
    config: the shared settings (schedule, optimizer, sigma, objective, strategies).
    workdir: the model directory written (``config.json``, checkpoints, history).
    model_config: the architecture fields of ``config.json`` (``model``,
      ``num_classes``, ``input_shape``, ``dataset``).
    progress: progress bars.
  """

  key: jax.Array
  model: Any
  train_data: tuple[np.ndarray, np.ndarray]
  eval_data: tuple[np.ndarray, np.ndarray] | None
  config: TrainConfig
  workdir: str
  model_config: Mapping[str, Any]
  progress: bool = True

  def options(self) -> TrainOptions:
    """The keywords of :func:`rsjax.training.train` for this job: its evaluation data, model
    directory (resumed when it holds checkpoints), architecture fields and progress bars."""
    return TrainOptions(
      eval_data=self.eval_data,
      workdir=self.workdir,
      resume=True,
      model_config=self.model_config,
      progress=self.progress,
    )

  def closing(self, history: list[dict], what: str, more: str) -> str:
    """``"trained <model> <what>: epoch E, clean accuracy A, <more>; saved in <workdir>"``."""
    if not history:
      return f"trained {self.model_config['model']} {what}: nothing left to train in {self.workdir}"
    last = history[-1]
    return (
      f"trained {self.model_config['model']} {what}: epoch {last['epoch']}, clean accuracy "
      f"{last['clean_acc']:.4f}, {more.format(**last)}; saved in {self.workdir}"
    )

  def fine_tuning(self, init: str) -> TrainJob:
    """This job started from the weights of the model directory ``init`` (``rsjax train
    --init``): its model is ``init``'s, and its ``config.json`` names what it derives from
    (``derived_from``: the transform ``fine-tune`` and ``init``'s weight fingerprint).

    Raises:
      ValueError: ``init`` holds a model of another architecture than the job's.
    """
    from rsjax import models

    model, config = models.load_model(init)
    for name in ARCHITECTURE:
      want, got = self.model_config.get(name), config.get(name)
      if name == "model_kwargs":
        want, got = want or {}, got or {}
      if name == "input_shape":
        want, got = list(want or ()), list(got or ())
      if want != got:
        raise ValueError(f"--init {init!r} holds a model with {name} {got!r}, not {want!r}")
    return dataclasses.replace(
      self, model=model, model_config={**self.model_config, "derived_from": fine_tuned_from(model)}
    )


def train_gaussian(job: TrainJob, init: str | None = None) -> str:
  """Cohen et al.'s training (``rsjax train --method cohen``): the job's objective
  (Gaussian noise by default; Consistency, SmoothAdv, MACER) with Sun et al.'s
  strategies if its config has them, from the weights of the model directory ``init``
  if given (:meth:`TrainJob.fine_tuning`); the closing line."""
  if init is not None:
    job = job.fine_tuning(init)
  _, history = train(job.key, job.model, job.train_data, job.config, **job.options())
  where = f"on {job.model_config['dataset']} at sigma={job.config.sigma}"
  return job.closing(history, where, "noisy accuracy {noisy_acc:.4f}")
