"""The frozen noise of a UCAN training in the model directory (``ucan_noise.npz``).

``rsjax.ucan.training.train_ucan`` freezes the ``(mu, sigma)`` of an
input-independent generator (a pattern, or the dataset-wise ``universal``
vectors) after training; ``rsjax certify --method ucan`` certifies with it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from rsjax.records.io import atomic_write

if TYPE_CHECKING:
  from rsjax.ucan._generators import FrozenNoise

__all__ = [
  "GENERATORS",
  "NOISE_FILE",
  "SOUND_GENERATORS",
  "load_noise",
  "load_universal_noise",
  "noise_file_hash",
  "read_noise",
  "save_noise",
  "save_universal_noise",
]

#: UCAN's noise generators (``rsjax train --method ucan --generator``).
GENERATORS = ("pattern-l1", "pattern-l2", "pattern-linf", "universal", "input")
#: The generators whose noise does not depend on the input (a certificate holds for them).
SOUND_GENERATORS = GENERATORS[:4]
#: The frozen noise in a model directory.
NOISE_FILE = "ucan_noise.npz"


def save_noise(workdir: str | os.PathLike, noise: FrozenNoise, generator: str) -> str:
  """Writes a frozen noise to ``workdir/ucan_noise.npz`` (atomically); returns the path.

  Args:
    workdir: the model's directory.
    noise: the frozen ``(mu, sigma)``, ``sigma`` in pixel units, of one shape.
    generator: the UCAN generator it came from (``"universal"``: the dataset-wise
      noise that ``rsjax certify --method ucan --ucan-sigma dataset`` reads).

  Raises:
    ValueError: an input-dependent generator, shapes that differ, or a sigma
      that is not finite and > 0 (or a mu that is not finite).
  """
  if generator not in SOUND_GENERATORS:
    raise ValueError(f"only the noise of {SOUND_GENERATORS} is frozen, got {generator!r}")
  mu = np.asarray(noise.mu, np.float32)
  sigma = np.asarray(noise.sigma, np.float32)
  if mu.shape != sigma.shape:
    raise ValueError(f"mu and sigma must have the same shape, got {mu.shape} and {sigma.shape}")
  if not np.all(np.isfinite(sigma)) or np.any(sigma <= 0) or not np.all(np.isfinite(mu)):
    raise ValueError("sigma must be finite and > 0, mu finite")
  path = os.path.join(os.fspath(workdir), NOISE_FILE)
  atomic_write(path, lambda f: np.savez(f, mu=mu, sigma=sigma, generator=generator))
  return path


def noise_file_hash(path: str | os.PathLike) -> str:
  """``"sha256:<hex>"`` of a noise file's bytes (a run's record binds its scales by it)."""
  import hashlib

  with open(path, "rb") as f:
    return "sha256:" + hashlib.sha256(f.read()).hexdigest()


def read_noise(workdir: str | os.PathLike) -> tuple[FrozenNoise, str] | None:
  """``(noise, generator)`` saved by :func:`save_noise`, or None when there is none."""
  path = os.path.join(os.fspath(workdir), NOISE_FILE)
  if not os.path.exists(path):
    return None
  from rsjax.ucan._generators import FrozenNoise

  with np.load(path) as f:
    return FrozenNoise(f["sigma"], mu=f["mu"]), str(f["generator"])


def load_noise(workdir: str | os.PathLike) -> FrozenNoise:
  """The noise frozen after UCAN training: ``FrozenNoise(sigma, mu)`` (sigma includes lambda)."""
  saved = read_noise(workdir)
  if saved is None:
    raise FileNotFoundError(
      f"no {NOISE_FILE} in {os.fspath(workdir)!r}: train with an "
      "input-independent UCAN generator first"
    )
  return saved[0]


def save_universal_noise(workdir: str | os.PathLike, *, mu: ArrayLike, sigma: ArrayLike) -> str:
  """Saves a frozen dataset-wise ``(mu, sigma)`` (UCAN's universal generator) in a model directory.

  ``rsjax certify --method ucan`` certifies with it (``--ucan-sigma auto`` or
  ``dataset``); it is the file a universal UCAN training writes.

  Args:
    workdir: the model directory of the classifier.
    mu: ``[*input_shape]`` shift.
    sigma: ``[*input_shape]`` scales (> 0), in pixel units (``--sigma`` is not applied).

  Returns:
    The path written.
  """
  from rsjax.ucan._generators import FrozenNoise

  return save_noise(workdir, FrozenNoise(sigma, mu=mu), "universal")  # checks the arrays


def load_universal_noise(workdir: str | os.PathLike) -> FrozenNoise | None:
  """The noise saved by :func:`save_universal_noise` (or a universal UCAN training), or None
  when the directory holds no frozen noise of the universal generator (none, or a pattern's)."""
  saved = None if workdir is None else read_noise(workdir)
  return saved[0] if saved is not None and saved[1] == "universal" else None
