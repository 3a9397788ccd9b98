"""The composed base classifier ``classifier(denoise(x + delta))`` (denoised smoothing).

Salman et al. (2020) and Carlini et al. (2023) certify an off-the-shelf
classifier by putting a denoiser in front of it. For randomized smoothing the
pair is just another base classifier: :class:`Denoised` is an ordinary
``apply_fn(params, x) -> logits`` with ``params = (denoiser_params,
classifier_params)``, so every method that takes a base classifier
(``rsjax.certify`` with or without ``multiclass`` or ``budget``,
``rsjax.idrs.certify``, the CLI's methods) certifies it unchanged, and the
engine compiles denoiser and classifier into its one program per noise batch.

The noise stays in the engine, in the [0, 1] input scale with the exact sigma;
the denoiser is a deterministic function of the noisy input (a diffusion
denoiser's timestep is fixed by sigma before certification), so the
certificate holds for sigma whatever the denoiser does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax

__all__ = ["Denoised", "Resized", "denoised", "identity_denoiser", "as_pure"]


def identity_denoiser(params: Any, x: jax.Array) -> jax.Array:
  """The denoiser that returns its input: ``classifier`` alone, as a composed classifier."""
  del params
  return x


@dataclasses.dataclass(frozen=True)
class Denoised:
  """``apply_fn((denoiser_params, classifier_params), x) -> classifier(denoise(x))``.

  Frozen and compared by value (hashable when both functions are): a static
  argument of the engine's ``jax.jit``, as any ``apply_fn``.

  Attributes:
    denoise_fn: ``denoise_fn(denoiser_params, x [b, *input_shape]) -> [b, *input_shape]``,
      deterministic, inputs and outputs in the classifier's [0, 1] input scale.
    classify_fn: ``classify_fn(classifier_params, x [b, *input_shape]) -> logits [b, C]``.
  """

  denoise_fn: Callable
  classify_fn: Callable

  def __call__(self, params, x: jax.Array) -> jax.Array:
    """``x [b, *input_shape]`` (noisy inputs) -> logits ``[b, C]``."""
    denoiser_params, classifier_params = params
    return self.classify_fn(classifier_params, self.denoise_fn(denoiser_params, x))


@dataclasses.dataclass(frozen=True)
class Resized:
  """``classify_fn(params, resize(x))``: the resize stage between denoiser and classifier.

  Bicubic with antialiasing (``jax.image.resize(method="bicubic", antialias=True)``: Keys'
  cubic with a = -0.5, half-pixel centres), which equals PyTorch's
  ``F.interpolate(mode="bicubic", antialias=True)`` (Carlini et al. resize CIFAR-10's 32 px
  denoised images to the ViT's 224 px this way). A deterministic function of the input, so
  certificates hold unchanged.

  Attributes:
    classify_fn: ``classify_fn(params, x [b, *size, C]) -> logits``.
    size: the classifier's ``(height, width)``.
    method: a ``jax.image.resize`` method (default ``"bicubic"``).
  """

  classify_fn: Callable
  size: tuple[int, int]
  method: str = "bicubic"

  def __call__(self, params: Any, x: jax.Array) -> jax.Array:
    shape = (x.shape[0], *self.size, x.shape[-1])
    y = jax.image.resize(x, shape, method=self.method, antialias=True).astype(x.dtype)
    return self.classify_fn(params, y)


def as_pure(model_or_fn: Any, params: Any = None) -> tuple[Callable, Any]:
  """``(fn, params)`` of an NNX module (eval mode, ``rsjax.models.to_apply_fn``) or of a
  pure function with its params.

  Raises:
    ValueError: a function given without params, or params given with a module.
  """
  from flax import nnx

  if isinstance(model_or_fn, nnx.Module):
    if params is not None:
      raise ValueError("give params only with a function; an NNX module carries its own")
    from rsjax.models import to_apply_fn

    return to_apply_fn(model_or_fn)
  if not callable(model_or_fn):
    raise ValueError(f"expected an NNX module or a function fn(params, x), got {model_or_fn!r}")
  return model_or_fn, params


def denoised(
  denoiser: Any,
  classifier: Any,
  *,
  denoiser_params: Any = None,
  classifier_params: Any = None,
  resize: tuple[int, int] | None = None,
) -> tuple[Denoised, tuple[Any, Any]]:
  """The composed base classifier ``classifier(denoiser(x))`` and its params.

  Args:
    denoiser: an NNX module mapping ``[b, *input_shape]`` to the same shape, or a
      pure ``fn(params, x)`` (then give ``denoiser_params``; None: the
      identity, ``identity_denoiser``).
    classifier: an NNX module returning logits, or a pure ``fn(params, x)``
      (then give ``classifier_params``).
    denoiser_params: params of a function ``denoiser``.
    classifier_params: params of a function ``classifier``.
    resize: the classifier's ``(height, width)``: a bicubic antialiased resize stage
      (:class:`Resized`) between denoiser and classifier; None: no resize.

  Returns:
    ``(apply_fn, params)`` for ``rsjax.certify`` and every other method.

  Example::

    apply_fn, params = denoised(dncnn, lenet)
    cert = rsjax.certify(key, apply_fn, params, x, sigma=0.25, num_classes=10)
  """
  if denoiser is None:
    denoiser = identity_denoiser
  d_fn, d_params = as_pure(denoiser, denoiser_params)
  c_fn, c_params = as_pure(classifier, classifier_params)
  if resize is not None:
    c_fn = Resized(c_fn, (int(resize[0]), int(resize[1])))
  return Denoised(d_fn, c_fn), (d_params, c_params)
