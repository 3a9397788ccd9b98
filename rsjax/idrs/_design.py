"""sigma(x) designs for input-dependent smoothing, with their semi-elasticity.

A design maps a batch of inputs to one noise level each and carries the rate r
of its semi-elasticity ``|log s(x) - log s(y)| <= r ||x - y||_2``, which the
certificate (Thm 3.2) needs. Designs are sigma sources (``rsjax.noise.sigma``): the
certificate takes the rate from the design (``evaluate``), never from a second
argument.

* ``ConstantSigma(sigma)``: rate 0 (Cohen et al.).
* ``KnnSigma(train_x, sigma_b, rate, k, m)``: the paper's eq. (1),
  ``sigma(x) = sigma_b exp(r (mean_{x_i in N_k(x)} ||x - x_i||_2 - m))`` with
  N_k(x) the k nearest training points in raw (flattened) input space. It is
  r-semi-elastic (Thm 4.1): the mean distance to the k nearest points of a
  finite set is 1-Lipschitz. Optional clipping to ``[sigma_min, sigma_max]``
  keeps the rate (the paper's toy caps sigma at 5 sigma_b).

Float rounding. Distances are computed on device in float32 as
``sqrt(sum((x - x_i)^2))`` (direct differences, no ``|x|^2 + |y|^2 - 2 x.y``
expansion, whose cancellation has no relative error bound), so the computed
mean distance is within a factor ``1 +- eps``, ``eps = (D + 2k + 8) 2^-24``,
of the exact one (sums of non-negative terms; order statistics move by the
same factor). With the float64 exponential and the float32 cast of sigma this
gives the envelope ``|log s~(x0) - log s~(x1)| <= r (1 + eps) a + slack(x0)``
with ``slack = 2 r eps d(x0) / (1 - eps) + 3 * 2^-24``; ``evaluate`` returns the
effective rate and this slack and the radius accounts for them (the effect is
~1e-5 relative).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from rsjax.noise.sigma import SigmaValues

__all__ = ["ConstantSigma", "KnnSigma", "DEFAULT_M", "make_design", "mean_knn_distance"]

#: The paper's normalization constants m (mean k-NN distance offsets) in [0, 1] pixel space.
DEFAULT_M = {"mnist": 1.5, "cifar10": 5.0}

_U32 = 2.0**-24


def _batch_size(x) -> int:
  shape = np.shape(x)
  if len(shape) < 2:
    raise ValueError(f"x must have shape [B, *input_shape], got shape {shape}")
  return int(shape[0])


class ConstantSigma:
  """The constant design ``sigma(x) = sigma`` (rate 0: Cohen et al.'s certificate)."""

  rate = 0.0

  def __init__(self, sigma: float) -> None:
    sigma = float(sigma)
    if not math.isfinite(sigma) or sigma <= 0.0:
      raise ValueError(f"sigma must be finite and > 0, got {sigma!r}")
    self.sigma = sigma

  def __call__(self, x: ArrayLike) -> jax.Array:
    """``[B]`` float32 noise levels of the inputs ``x [B, *input_shape]``."""
    return jnp.full((_batch_size(x),), self.sigma, jnp.float32)

  def evaluate(self, x: ArrayLike) -> SigmaValues:
    b = _batch_size(x)
    return SigmaValues(np.full((b,), self.sigma, np.float32), 0.0, np.zeros((b,), np.float64))

  def __repr__(self) -> str:
    return f"ConstantSigma(sigma={self.sigma})"


@functools.partial(jax.jit, static_argnames=("k", "chunk"))
def _knn_mean_block(x, train, num_train, *, k: int, chunk: int):
  """Mean distance of each row of ``x [b, D]`` to its k nearest rows of ``train [n_pad, D]``.

  ``train`` is padded to a multiple of ``chunk``; rows ``>= num_train`` are ignored.
  The k smallest squared distances are carried through a ``lax.scan`` over the
  chunks, so at most ``[b, chunk + k]`` distances exist at a time.
  """
  b = x.shape[0]
  chunks = train.reshape(-1, chunk, train.shape[-1])

  def body(best, inp):
    t, start = inp
    d2 = jnp.sum(jnp.square(x[:, None, :] - t[None, :, :]), axis=-1)  # [b, chunk]
    valid = (start + jnp.arange(chunk)) < num_train
    d2 = jnp.where(valid[None, :], d2, jnp.inf)
    neg, _ = jax.lax.top_k(-jnp.concatenate([best, d2], axis=1), k)
    return -neg, None

  starts = jnp.arange(chunks.shape[0], dtype=jnp.int32) * chunk
  init = jnp.full((b, k), jnp.inf, jnp.float32)
  best, _ = jax.lax.scan(body, init, (chunks, starts))
  return jnp.mean(jnp.sqrt(best), axis=1)


def mean_knn_distance(
  x: ArrayLike, train: ArrayLike, *, k: int, train_chunk: int = 512, max_elements: int = 2**28
) -> jax.Array:
  """Mean L2 distance of each input to its k nearest training points (device, float32).

  Args:
    x: ``[B, *shape]`` inputs.
    train: ``[N, *shape]`` training points.
    k: number of neighbours (``1 <= k <= N``).
    train_chunk: training points per scan step.
    max_elements: bound on ``inputs_per_block * train_chunk * D``, the size of
      the difference tensor if the backend did not fuse it into the reduction
      (XLA fuses it on CPU and GPU, where the temporaries stay at
      ``[block, chunk]``); inputs are processed in blocks of that size.

  Returns:
    ``[B]`` float32 jax array.
  """
  n = np.shape(train)[0]
  if not 1 <= k <= n:
    raise ValueError(f"k must lie in [1, number of training points = {n}], got {k!r}")
  train, chunk = _pad_train(train, train_chunk)
  return _mean_knn_padded(x, train, n, train.shape[1], k, chunk, max_elements)


def _pad_train(train, train_chunk: int):
  """Flattens ``train [N, *shape]`` to float32 ``[N_pad, D]``, zero rows up to a chunk multiple.

  Returns:
    ``(train_pad, chunk)`` with ``chunk = min(train_chunk, N)``.
  """
  train = jnp.asarray(train, jnp.float32).reshape(np.shape(train)[0], -1)
  n, d = train.shape
  chunk = int(min(train_chunk, n))
  pad = -n % chunk
  if pad:
    train = jnp.concatenate([train, jnp.zeros((pad, d), jnp.float32)])
  return train, chunk


def _mean_knn_padded(x, train_pad, n, d, k, chunk, max_elements):
  b = _batch_size(x)
  x = jnp.asarray(x, jnp.float32).reshape(b, -1)
  if x.shape[1] != d:
    raise ValueError(f"x has {x.shape[1]} features per input, the training set {d}")
  block = int(max(1, min(b, max_elements // (chunk * d))))
  out = []
  for s in range(0, b, block):
    xb = x[s : s + block]
    if xb.shape[0] < block:  # keep one compiled shape
      xb = jnp.concatenate([xb, jnp.zeros((block - xb.shape[0], d), jnp.float32)])
    out.append(_knn_mean_block(xb, train_pad, n, k=k, chunk=chunk)[: min(block, b - s)])
  return jnp.concatenate(out)


class KnnSigma:
  """The paper's design ``sigma_b exp(r (mean k-NN distance to the training set - m))``.

  Args:
    train_x: ``[N, *input_shape]`` training inputs (same scale as the inputs to
      certify, e.g. [0, 1] pixels). Stored once on the default device.
    sigma_b: base noise level.
    rate: semi-elasticity r >= 0.
    k: number of nearest neighbours.
    m: normalization constant (``DEFAULT_M``: 1.5 for MNIST, 5 for CIFAR-10).
    sigma_min: optional lower clip of sigma(x).
    sigma_max: optional upper clip of sigma(x).
    train_chunk: training points per step of the device scan.
    max_elements: bound on inputs x chunk x D per device step (see ``mean_knn_distance``).
  """

  def __init__(
    self,
    train_x: ArrayLike,
    sigma_b: float,
    rate: float,
    k: int = 20,
    m: float = 0.0,
    *,
    sigma_min: float | None = None,
    sigma_max: float | None = None,
    train_chunk: int = 512,
    max_elements: int = 2**28,
  ) -> None:
    train = np.asarray(jax.device_get(train_x), dtype=np.float32)
    if train.ndim < 2 or train.shape[0] < 1:
      raise ValueError(f"train_x must have shape [N, *input_shape], got {train.shape}")
    if not np.all(np.isfinite(train)):
      raise ValueError("train_x contains NaN or inf")
    self.sigma_b = float(sigma_b)
    self.rate = float(rate)
    self.m = float(m)
    if not math.isfinite(self.sigma_b) or self.sigma_b <= 0:
      raise ValueError(f"sigma_b must be finite and > 0, got {sigma_b!r}")
    if not math.isfinite(self.rate) or self.rate < 0:
      raise ValueError(f"rate must be finite and >= 0, got {rate!r}")
    if not math.isfinite(self.m):
      raise ValueError(f"m must be finite, got {m!r}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= train.shape[0]:
      raise ValueError(f"k must be an integer in [1, {train.shape[0]}], got {k!r}")
    self.k = int(k)
    self.sigma_min = None if sigma_min is None else float(sigma_min)
    self.sigma_max = None if sigma_max is None else float(sigma_max)
    if self.sigma_min is not None and not self.sigma_min > 0:
      raise ValueError("sigma_min must be > 0")
    if None not in (self.sigma_min, self.sigma_max) and self.sigma_max < self.sigma_min:
      raise ValueError("sigma_max must be >= sigma_min")
    self.input_shape = train.shape[1:]
    self.num_train = train.shape[0]
    self.dim = int(np.prod(self.input_shape))
    self._train, self._chunk = _pad_train(train, train_chunk)
    self._max_elements = int(max_elements)
    #: relative error bound of the computed mean distance.
    self.eps = (self.dim + 2 * self.k + 8) * _U32

  def mean_distance(self, x: ArrayLike) -> jax.Array:
    """``[B]`` float32 mean distance of ``x`` to its k nearest training points (device)."""
    if tuple(np.shape(x)[1:]) != tuple(self.input_shape):
      raise ValueError(f"x must have shape [B, *{self.input_shape}], got {np.shape(x)}")
    return _mean_knn_padded(
      x, self._train, self.num_train, self.dim, self.k, self._chunk, self._max_elements
    )

  def _sigma_from_distance(self, dist) -> np.ndarray:
    d = np.asarray(dist, np.float64)
    log_s = math.log(self.sigma_b) + self.rate * (d - self.m)
    if self.sigma_min is not None:
      log_s = np.maximum(log_s, math.log(self.sigma_min))
    if self.sigma_max is not None:
      log_s = np.minimum(log_s, math.log(self.sigma_max))
    s = np.exp(log_s).astype(np.float32)
    if not np.all(np.isfinite(s)) or np.any(s <= 0):
      raise ValueError(
        "sigma(x) overflowed or underflowed float32; clip it with sigma_max "
        "/ sigma_min or lower the rate"
      )
    return s

  def evaluate(self, x: ArrayLike) -> SigmaValues:
    """Noise levels of ``x`` with the envelope the certificate needs.

    Returns:
      ``SigmaValues(sigma [B] float32, rate = r (1 + eps), slack [B])``.
    """
    d = np.asarray(jax.device_get(self.mean_distance(x)), np.float64)
    sigma = self._sigma_from_distance(d)
    if self.rate == 0.0:  # the same float32 value at every input: exactly constant
      return SigmaValues(sigma, 0.0, np.zeros_like(d))
    eps = self.eps
    slack = 2.0 * self.rate * eps * d / (1.0 - eps) + 3.0 * _U32
    return SigmaValues(sigma, self.rate * (1.0 + eps), slack)

  def __call__(self, x: ArrayLike) -> jax.Array:
    """``[B]`` float32 noise levels of ``x [B, *input_shape]``."""
    return jnp.asarray(self.evaluate(x).sigma)

  def __repr__(self) -> str:
    return (
      f"KnnSigma(sigma_b={self.sigma_b}, rate={self.rate}, k={self.k}, m={self.m}, "
      f"num_train={self.num_train}, sigma_min={self.sigma_min}, "
      f"sigma_max={self.sigma_max})"
    )


def make_design(
  train_x: ArrayLike | None = None,
  *,
  sigma: float,
  rate: float = 0.0,
  k: int = 20,
  m: float | None = None,
  dataset: str | None = None,
  sigma_min: float | None = None,
  sigma_max: float | None = None,
) -> ConstantSigma | KnnSigma:
  """A design from command-line style options (``--sigma --idrs-rate --idrs-k --idrs-m``).

  Args:
    train_x: ``[N, *input_shape]`` training inputs (needed when ``rate > 0``).
    sigma: sigma_b (or the constant sigma when ``rate == 0``).
    rate: semi-elasticity r; 0 gives ``ConstantSigma(sigma)``.
    k: neighbours.
    m: normalization; default from ``DEFAULT_M[dataset]``.
    dataset: dataset name used to look up the default m (``"mnist"``, ``"cifar10"``).
    sigma_min, sigma_max: optional clipping of sigma(x).

  Returns:
    ``ConstantSigma`` or ``KnnSigma``.
  """
  if float(rate) == 0.0:
    return ConstantSigma(sigma)
  if train_x is None:
    raise ValueError("train_x is required for an input-dependent design (rate > 0)")
  if m is None:
    key = "" if dataset is None else str(dataset).lower()
    m = next((value for name, value in DEFAULT_M.items() if key.startswith(name)), None)
    if m is None:
      raise ValueError(
        f"m is required (no default for dataset {dataset!r}; the paper uses {DEFAULT_M})"
      )
  return KnnSigma(train_x, sigma, rate, k, m, sigma_min=sigma_min, sigma_max=sigma_max)
