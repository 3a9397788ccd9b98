"""``--method cohen`` as a value (no JAX here: ``rsjax verify`` reads it)."""

from __future__ import annotations

import math

from rsjax.claims import GAUSSIAN
from rsjax.cohen._check import check_cohen
from rsjax.cohen._recertify_check import check_recertify, parse_gamma
from rsjax.runs.method import INIT, Method, Option, Training

__all__ = ["METHOD", "RECERTIFY", "parse_grid"]


def parse_grid(text: str) -> tuple[float, ...]:
  """A radius grid ``"0,0.25,0.5"`` -> ascending radii >= 0 (``--grid``)."""
  try:
    radii = tuple(float(v) for v in text.split(","))
  except ValueError:
    raise ValueError(f"expected comma-separated radii, got {text!r}") from None
  if not all(math.isfinite(r) and r >= 0 for r in radii) or any(
    b <= a for a, b in zip(radii, radii[1:], strict=False)
  ):
    raise ValueError(f"radii must be >= 0 and strictly increasing, got {text}")
  return radii


#: ``--method cohen``: Cohen et al.'s CERTIFY (any noise family, binary or multiclass, budgeted).
METHOD = Method(
  "cohen",
  "Cohen et al.'s CERTIFY (Gaussian, Laplace or uniform noise)",
  "rsjax.cohen._certify:Cohen",
  (
    Option(
      "grid",
      None,
      "budgeted CERTIFY for this radius grid (e.g. 0,0.25,0.5,0.75): "
      "stop each input once its certified grid radius is decided, at most --N "
      "samples; adds a 'samples' column",
      parse_grid,
    ),
    Option(
      "budget_rule",
      "looks",
      "the stopping rule of budgeted CERTIFY (--grid): 'looks' (alpha split over "
      "a few geometric looks) or 'anytime' (an anytime-valid mixture test per grid "
      "level after every round, and Clopper-Pearson at --N)",
      str,
      choices=("looks", "anytime"),
    ),
  ),
  check=check_cohen,
  multiclass=True,
  budget=True,
  training=Training(
    "rsjax.training.job:train_gaussian",
    "noisy inputs (Gaussian by default; --objective consistency, smoothadv, macer; Sun et "
    "al.'s --discard, --reweigh, --sphere-attack; --init fine-tunes a trained model)",
    (INIT,),
  ),
)


def _digest(what: str):
  """The ``type=`` of an option naming a digest: text, stripped."""

  def parse(text: str) -> str:
    if not text or text != text.strip():
      raise ValueError(f"expected the {what}, got {text!r}")
    return text

  return parse


def _parent_paths(options: dict, locate) -> dict:
  """The options with the parent's result file mapped by ``locate("parent", path)``."""
  parent = options.get("parent")
  return {**options, "parent": locate("parent", str(parent))} if parent else options


#: ``--method recertify``: a child model certified from its parent run's bounds (``rsjax recertify``).
RECERTIFY = Method(
  "recertify",
  "a changed model (the child) from its parent run's certificate and few disagreement "
  "samples: rsjax recertify PARENT.tsv CHILD_MODEL OUT.tsv",
  "rsjax.cohen._recertify:Recertify",
  (
    Option("parent", None, "the parent run's result file (set by rsjax recertify)", str),
    Option(
      "parent_claim",
      None,
      "the parent run's claim digest (set by rsjax recertify)",
      _digest("parent's claim digest"),
    ),
    Option(
      "parent_model",
      None,
      "the parent's model fingerprint (set by rsjax recertify)",
      _digest("parent's model fingerprint"),
    ),
    Option(
      "parent_records",
      None,
      "the SHA-256 of the parent's certificate record (set by rsjax recertify)",
      _digest("digest of the parent's records"),
    ),
    Option("fallback", False, "certify the rows the parent's bound cannot from scratch", bool),
    Option(
      "gamma",
      None,
      "certify from scratch (alpha_1 + alpha_2) the rows whose parent p_A_lower >= gamma",
      parse_gamma,
    ),
    Option(
      "replay",
      None,
      "the SHA-256 of the parent's stored votes: the disagreement on the parent's own "
      "estimation samples (set by rsjax recertify --replay)",
      _digest("digest of the parent's votes"),
    ),
  ),  # fmt: skip
  check=check_recertify,
  paths=_parent_paths,
  noises=GAUSSIAN,
  multiclass=True,
  columns=("zeta", "fallback"),
)
