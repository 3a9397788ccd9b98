"""The certifiers of ``--method patch`` (derandomized smoothing) and ``--method ablation``
(randomized ablation, L0): the counts of a classifier of encoded images (``_ablate``) and the
certificate rules (``_rules``).

Both take the classifier of the encoded images ``[b, H, W, 2C]`` (``rsjax train --method
patch`` or ``ablation`` trains one) and the images ``[B, H, W, C]`` of the run's dataset; the
run's sigma and noise are not used (the run records them as any run does).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import jax
import numpy as np

from rsjax import stats
from rsjax.ablation import _ablate, _rules
from rsjax.ablation._check import TOKENS_DROPPED
from rsjax.engine.driver import ABSTAIN, Batch, Certificate
from rsjax.runs.method import Certifier, Context
from rsjax.util import as_key

__all__ = [
  "ABLATIONS",
  "L0Ablation",
  "Patch",
  "PatchCertificate",
  "certify_patch",
  "details_of",
  "l0_details",
]

#: The kept regions of derandomized smoothing.
ABLATIONS = ("column", "row", "block")
#: Images of a call when the caller does not choose (a block ablation is ``H * W`` passes).
INPUTS_PER_CALL = 8
#: Forward passes per step when the run's batch is not a number.
DEFAULT_BATCH = 1000


def _batch(settings) -> int:
  """The forward passes per step (speed only): the run's batch when it is a number."""
  b = settings.batch_size
  return int(b) if isinstance(b, int) and not isinstance(b, bool) else DEFAULT_BATCH


def _images(x, what: str) -> np.ndarray:
  """``x`` as ``[B, H, W, C]`` float32, refused unless images."""
  x = np.asarray(x, np.float32)
  if x.ndim != 4:
    raise ValueError(f"{what}: x must be images [B, H, W, C], got shape {x.shape}")
  if not np.all(np.isfinite(x)):
    raise ValueError(f"{what}: x holds NaN or inf")
  return x


def _check_context(what: str, ctx: Context) -> None:
  """The ablation certifiers certify images with a classifier of their encoding."""
  shape = tuple(getattr(ctx.dataset, "input_shape", ()))
  if len(shape) != 3:
    raise ValueError(f"{what} certifies images (H, W, C), not inputs {shape}")
  z = jax.ShapeDtypeStruct((1, *_ablate.encoded_shape(shape)), np.float32)
  try:
    out = jax.eval_shape(ctx.apply_fn, ctx.params, z)
  except Exception:  # noqa: BLE001 -- any failure: the model does not take them
    out = None
  if getattr(out, "shape", None) != (1, ctx.dataset.num_classes):
    raise ValueError(
      f"{what}: the model does not take the encoded images {list(z.shape[1:])} ((x, 1 - x) "
      "at kept pixels): train it with rsjax train --method patch or ablation"
    )


@dataclasses.dataclass(frozen=True)
class PatchCertificate(Certificate):
  """A derandomized certificate: ``radius`` is the largest certified square patch side
  (pixels), ``counts`` the exact votes of every kept region, ``num_samples`` their number;
  ``p_lower`` is the top class's share of the votes (exact, no confidence level)."""

  num_samples: np.ndarray | None = None


def votes_of(threshold: float | None) -> str:
  """How each kept region votes, as the run's details state it."""
  return "argmax" if threshold is None else f"softmax >= {float(threshold)!r}"


def details_of(
  ablation: str, size: int, shape, threshold: float | None = None, drop_tokens: bool = False
) -> dict:
  """The run-wide facts a patch run's radii depend on (``RunSpec.details``)."""
  positions = len(_ablate.position_masks(tuple(shape), ablation, size))
  out = {
    "ablation": ablation,
    "size": int(size),
    "positions": positions,
    "encoding": _ablate.ENCODING,
    "votes": votes_of(threshold),
  }
  if drop_tokens:
    out["tokens"] = TOKENS_DROPPED
  return out


def certify_patch(
  apply_fn, params, x, num_classes: int, *, ablation: str, size: int, batch=1000, precision=None,
  threshold=None, patch_tokens: int | None = None,
):  # fmt: skip
  """The derandomized certificate of images ``x [B, H, W, C]`` (a :class:`PatchCertificate`;
  ``precision`` as ``rsjax.Sampling``'s, None: float32; ``threshold``: every class whose
  softmax is at least it votes, None: the top class; ``patch_tokens``: the ViT's patch side,
  its ablated tokens dropped (``apply_fn`` a :class:`~rsjax.ablation.TokenApply`), None: the
  whole encoded image through ``apply_fn``, or for an rsjax LeNet without input normalization
  and bands, its first convolution only near each band: ``_band``, the same counts)."""
  x = _images(x, "patch")
  masks = _ablate.position_masks(x.shape[1:], ablation, size)
  if patch_tokens is not None:
    from rsjax.ablation import _tokens

    counts = _tokens.token_counts(
      apply_fn, params, x, masks, patch_tokens, num_classes, batch, precision or "float32",
      threshold,
    )  # fmt: skip
  else:
    from rsjax.ablation import _band

    args = (apply_fn, params, x, masks, num_classes, batch, precision or "float32", threshold)
    counts = _band.band_counts(*args)  # a LeNet's band-only first convolution, None else
    if counts is None:
      counts = _ablate.patch_counts(*args)
  top = _rules.smoothed_class(counts)
  radius = _rules.patch_radius(counts, ablation, size, x.shape[1:]).astype(np.float64)
  p = masks.shape[0]
  return PatchCertificate(
    prediction=top.astype(np.int64),
    radius=radius,
    p_lower=counts[np.arange(len(top)), top] / p,
    counts=counts,
    norm="patch",
    guarantee=(
      f"deterministic: no square patch of side <= radius pixels changes the smoothed class "
      f"({ablation} ablation of size {size}, {p} positions)"
    ),
    num_samples=np.full(len(top), p, np.int64),
  )


@dataclasses.dataclass(frozen=True)
class Patch(Certifier):
  """Derandomized smoothing against patches (Levine and Feizi, NeurIPS 2020): every band
  (``"column"``, ``"row"``) or block of side ``size`` kept in turn, the exact votes, the
  largest certified patch side.

  Attributes:
    ablation: ``"column"``, ``"row"`` or ``"block"``.
    size: ``s``, the band's width or the block's side (pixels).
    threshold: None (each region votes its top class) or a softmax level in (0, 1]: each
      region votes for every class at or above it (ART's ``levine2020`` base classifier).
    drop_tokens: the classifier is a ``rsjax.models.VisionTransformer`` (its ``apply_fn`` an
      ``nnx`` graph definition's, as ``rsjax.models.to_apply_fn`` makes) and only the kept
      region's patch tokens go through it (Salman et al. 2022; ``rsjax.ablation.token_counts``).
  """

  ablation: str = "column"
  size: int = 4
  threshold: float | None = None
  drop_tokens: bool = False
  inputs_per_call: ClassVar[int | None] = INPUTS_PER_CALL

  def __post_init__(self) -> None:
    if self.ablation not in ABLATIONS:
      raise ValueError(f"ablation must be one of {list(ABLATIONS)}, got {self.ablation!r}")
    if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
      raise ValueError(f"ablation_size must be an integer >= 1, got {self.size!r}")
    if self.threshold is not None and not 0 < self.threshold <= 1:
      raise ValueError(f"vote_threshold must lie in (0, 1], got {self.threshold!r}")

  @classmethod
  def from_options(
    cls, ctx: Context, *, ablation: str, ablation_size: int, vote_threshold: float | None = None,
    drop_tokens: bool = False,
  ) -> Patch:  # fmt: skip
    _check_context("method patch", ctx)
    h, w = ctx.dataset.input_shape[:2]
    if ablation_size > max(h, w):
      raise ValueError(f"ablation_size {ablation_size} is larger than the images ({h}x{w})")
    if drop_tokens:
      vit_patch(ctx.apply_fn, ctx.params)  # refused unless a ViT
    return cls(ablation, int(ablation_size), vote_threshold, bool(drop_tokens))

  def describe(self, ctx: Context) -> str:
    shape = ctx.dataset.input_shape
    p = details_of(self.ablation, self.size, shape)["positions"]
    return (
      f"derandomized smoothing (Levine and Feizi 2020): {self.ablation} ablation of size "
      f"{self.size}, {p} positions, votes {votes_of(self.threshold)}, exact counts (sigma "
      "and noise not used)"
    )

  def details(self, ctx: Context) -> dict:
    shape = ctx.dataset.input_shape
    return details_of(self.ablation, self.size, shape, self.threshold, self.drop_tokens)

  def certify(self, batch: Batch) -> PatchCertificate:
    apply_fn, patch = batch.apply_fn, None
    if self.drop_tokens:
      from rsjax.ablation._tokens import TokenApply

      patch = vit_patch(batch.apply_fn, batch.params)
      apply_fn = TokenApply(batch.apply_fn.graphdef)
    return certify_patch(
      apply_fn, batch.params, batch.x, batch.num_classes, ablation=self.ablation,
      size=self.size, batch=_batch(batch.settings), precision=batch.settings.precision,
      threshold=self.threshold, patch_tokens=patch,
    )  # fmt: skip


def vit_patch(apply_fn, params) -> int:
  """The patch side of the ``rsjax.models.VisionTransformer`` behind ``apply_fn`` (an
  ``nnx`` graph definition's forward); refused for any other classifier."""
  from rsjax.ablation._band import merged_model
  from rsjax.models import VisionTransformer

  graphdef = getattr(apply_fn, "graphdef", None)
  model = None if graphdef is None else merged_model(graphdef, params)
  if not isinstance(model, VisionTransformer):
    raise ValueError(
      "drop_tokens: the model must be a rsjax ViT (rsjax.models.VisionTransformer, its "
      "apply_fn from rsjax.models.to_apply_fn)"
    )
  return int(model.config.patch_size)


def l0_details(keep: int, shape) -> dict:
  """The run-wide facts an L0 run's radii depend on (``RunSpec.details``)."""
  return {"keep": int(keep), "pixels": int(shape[0]) * int(shape[1]), "encoding": _ablate.ENCODING}


@dataclasses.dataclass(frozen=True)
class L0Ablation(Certifier):
  """Randomized ablation (Levine and Feizi, AAAI 2020): ``keep`` of the ``H * W`` pixels kept
  at random (every channel of a pixel together), Cohen et al.'s two passes (selection
  ``fold_in(key, 0)``, ``n0`` ablations; estimation ``fold_in(key, 1)``, ``n``), the
  Clopper-Pearson bound and the largest certified number of changed pixels.

  Attributes:
    keep: ``k``, the pixels kept per ablation.
  """

  keep: int = 45

  def __post_init__(self) -> None:
    if isinstance(self.keep, bool) or not isinstance(self.keep, int) or self.keep < 1:
      raise ValueError(f"keep must be an integer >= 1, got {self.keep!r}")

  @classmethod
  def from_options(cls, ctx: Context, *, keep: int) -> L0Ablation:
    _check_context("method ablation", ctx)
    d = math.prod(ctx.dataset.input_shape[:2])
    if keep > d:
      raise ValueError(f"keep {keep} is more than the {d} pixels of an image")
    return cls(int(keep))

  def describe(self, ctx: Context) -> str:
    d = math.prod(ctx.dataset.input_shape[:2])
    return (
      f"randomized ablation (Levine and Feizi 2020): {self.keep} of {d} pixels kept, "
      f"n0={ctx.settings.n0}, n={ctx.settings.n}, L0 radius (sigma and noise not used)"
    )

  def details(self, ctx: Context) -> dict:
    return l0_details(self.keep, ctx.dataset.input_shape)

  def certify(self, batch: Batch) -> Certificate:
    x = _images(batch.x, "ablation")
    s, d = batch.settings, x.shape[1] * x.shape[2]
    if self.keep > d:
      raise ValueError(f"keep {self.keep} is more than the {d} pixels of an image")
    ids = np.arange(len(x)) if batch.ids is None else np.asarray(batch.ids, np.int64)
    key = as_key(batch.key)
    args = (batch.apply_fn, batch.params)
    rest = (self.keep, batch.num_classes, _batch(s), s.precision)
    c0 = _ablate.l0_counts(*args, jax.random.fold_in(key, 0), x, ids, s.n0, *rest)
    c1 = _ablate.l0_counts(*args, jax.random.fold_in(key, 1), x, ids, s.n, *rest)
    guess = np.argmax(c0, axis=1)
    n_a = c1[np.arange(len(x)), guess]
    p = np.asarray(stats.clopper_pearson_lower(n_a, s.n, s.alpha), np.float64)
    rho = _rules.l0_radius(p, d, self.keep)
    return Certificate(
      prediction=np.where(rho >= 0, guess, ABSTAIN).astype(np.int64),
      radius=np.maximum(rho, 0).astype(np.float64),
      p_lower=p,
      counts=c1,
      counts_selection=c0,
      norm="l0",
      guarantee=(
        f"with probability >= 1 - alpha per input: no change of <= radius pixels changes the "
        f"smoothed class ({self.keep} of {d} pixels kept)"
      ),
    )
