"""``--method patch`` and ``--method ablation`` as values (no JAX here: ``rsjax verify`` reads
them)."""

from __future__ import annotations

from rsjax.ablation._check import check_l0, check_patch
from rsjax.runs.method import INIT, Method, Option, Training

__all__ = ["L0_METHOD", "PATCH_METHOD"]

#: The noise a run of an ablation method states: the default, not drawn (ablation is the
#: randomness of these methods), so no other noise is claimed.
_NOISES = ("gaussian",)

_ABLATION = Option(
  "ablation",
  "column",
  "derandomized smoothing: keep one band of columns ('column'), of rows ('row') or one "
  "square block ('block') of every position in turn",
  str,
  choices=("column", "row", "block"),
)
_SIZE = Option(
  "ablation_size", 4, "the width of the kept band, or the side of the kept block (pixels)", int,
  positive=True,
)  # fmt: skip


def _patch_words(options, sampling) -> str:
  """What a patch run claims, in words (``Method.claim_words``)."""
  threshold = options.get("vote_threshold")
  votes = "" if threshold is None else f", votes softmax >= {threshold:g}"
  votes += ", ablated ViT tokens dropped" if options.get("drop_tokens") else ""
  return (
    f"{options['ablation']} ablation of size {options['ablation_size']}{votes}, every position "
    "(exact votes, no noise drawn), radius: the largest square patch side (pixels)"
  )


def _l0_words(options, sampling) -> str:
  """What a randomized-ablation run claims, in words (``Method.claim_words``)."""
  return (
    f"{options['keep']} pixels kept (no noise drawn), N0 {sampling.n0}, N {sampling.n}, "
    f"alpha {sampling.alpha:g}, radius: changed pixels (L0)"
  )


_THRESHOLD = Option(
  "vote_threshold",
  None,
  "derandomized smoothing: each kept region votes for every class whose softmax is at least "
  "this (ART's levine2020 base classifier), not only its top class",
  float,
  positive=True,
)
_DROP = Option(
  "drop_tokens",
  False,
  "derandomized smoothing with a rsjax ViT: only the kept region's patch tokens go through "
  "it (Salman et al. 2022), not the whole encoded image",
  bool,
)
_KEEP = Option("keep", 45, "randomized ablation: pixels kept of each image (k)", int, positive=True)

#: ``--method patch``: derandomized smoothing against square patches (exact counts).
PATCH_METHOD = Method(
  "patch",
  "derandomized smoothing against patches (Levine and Feizi 2020): every band or block "
  "kept in turn, exact votes, the largest certified square patch side",
  "rsjax.ablation._certify:Patch",
  (_ABLATION, _SIZE, _THRESHOLD, _DROP),
  check=check_patch,
  noises=_NOISES,
  claim_words=_patch_words,
  timed_batch=False,
  training=Training(
    "rsjax.ablation.training:train_patch",
    "encoded images (x, 1 - x) with one random band or block of --ablation-size kept per "
    "example and step (the model takes 2 x the channels; --init fine-tunes; --drop-tokens: a "
    "ViT sees the kept region's tokens only)",
    (_ABLATION, _SIZE, _DROP, INIT),
  ),
)

#: ``--method ablation``: randomized ablation, an L0 radius (Cohen et al.'s two passes).
L0_METHOD = Method(
  "ablation",
  "randomized ablation against L0 attacks (Levine and Feizi 2020): --keep pixels kept at "
  "random, Clopper-Pearson, the largest certified number of changed pixels",
  "rsjax.ablation._certify:L0Ablation",
  (_KEEP,),
  check=check_l0,
  noises=_NOISES,
  claim_words=_l0_words,
  timed_batch=False,
  training=Training(
    "rsjax.ablation.training:train_l0",
    "encoded images (x, 1 - x) with --keep random pixels kept per example and step (the "
    "model takes 2 x the channels; --init fine-tunes)",
    (_KEEP, INIT),
  ),
)
