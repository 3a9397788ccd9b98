"""``--method dual`` as a value (no JAX here: ``rsjax verify`` reads it)."""

from __future__ import annotations

from collections.abc import Callable

from rsjax.claims import GAUSSIAN
from rsjax.dual._check import check_dual, parse_expert_models, parse_experts
from rsjax.runs.method import Method, Option, Training

__all__ = ["METHOD", "parse_experts"]


def _experts(text: str) -> str:
  """The ``type=`` of ``--dual-experts``: the text, once it parses (recorded as given)."""
  parse_experts(text)
  return text


def _expert_models(text: str) -> str:
  """The ``type=`` of ``--dual-expert-models``: the text, once it parses."""
  parse_expert_models(text)
  return text


def _paths(options: dict, locate: Callable[[str, str], str]) -> dict:
  """The options with each expert's directory mapped by ``locate("expert", path)``
  (``Method.paths``); each sigma's text as recorded."""
  text = options.get("dual_experts")
  if not text:
    return options
  parse_experts(text)
  parts = [part.partition(":") for part in text.split(",")]
  moved = ",".join(f"{s}:{locate('expert', where)}" for s, _, where in parts)
  return {**options, "dual_experts": moved}


#: ``--dual-experts``: shared by ``certify`` and ``train``.
EXPERTS = Option(
  "dual_experts",
  None,
  "the classifier at each sigma, in the estimator's index order: "
  "SIGMA:MODEL_DIR,SIGMA:MODEL_DIR,...",
  _experts,
)

#: ``--method dual``: the estimator's certificate, then the chosen sigma's expert's.
METHOD = Method(
  "dual",
  "dual randomized smoothing: a smoothed sigma estimator (the model; --sigma its noise) "
  "picks one of the experts' sigmas per input, both certified (Sun et al., ICLR 2026)",
  "rsjax.dual._certify:Dual",
  (
    EXPERTS,
    Option(
      "dual_alpha_split",
      0.5,
      "the estimator's share of --alpha (the rest: the classifier's)",
      float,
    ),
    Option("dual_estimator_n", None, "the estimator's estimation samples (default --N)", int),
    Option("dual_estimator_n0", None, "the estimator's selection samples (default --N0)", int),
    Option(
      "dual_expert_models",
      None,
      "each expert's FINGERPRINT:CONFIG_DIGEST, in order (set by certify from the experts "
      "before any noise is drawn: the claim binds them)",
      _expert_models,
    ),
  ),
  check=check_dual,
  paths=_paths,
  bind="rsjax.dual._certify:bind",
  noises=GAUSSIAN,
  columns=("sigma", "sigma_index", "estimator_radius"),
  radius_columns={
    "estimator_radius": "the sigma estimator's radius: of the choice of sigma, not of the class",
  },
  training=Training(
    "rsjax.dual.training:train_job",
    "the sigma estimator (K classes) on the experts' targets: per input the largest sigma "
    "whose expert is right on a few noisy samples (--dual-target); --sigma is its noise",
    (
      EXPERTS,
      Option("dual_draws", 8, "noisy samples per input and expert", int, positive=True),
      Option(
        "dual_target",
        "confident",
        "confident: the largest sigma whose expert is right on --dual-tau of the draws; "
        "radius: the largest estimated radius; soft: the paper's softmax over the estimated "
        "radii (trained with AdamW, rsjax.dual.paper)",
        str,
        ("confident", "radius", "soft"),
      ),
      Option("dual_tau", 1.0, "the confident target's share of right draws", float),
      Option(
        "dual_temperature", 0.25, "the soft targets' softmax temperature", float, positive=True
      ),  # fmt: skip
      Option(
        "dual_consistency",
        0.0,
        "KL weight of the paper's consistency term (2 noise copies, entropy weight 0.5; "
        "the paper's 40); 0: none. Trains with AdamW (rsjax.dual.paper)",
        float,
      ),
      Option(
        "dual_rebalance",
        False,
        "weight each input by the inverse frequency of its best sigma (the paper's); trains "
        "with AdamW (rsjax.dual.paper)",
        bool,
      ),
      Option(
        "dual_init",
        "none",
        "expert: start from the expert at --sigma (same architecture), all but its head",
        str,
        ("none", "expert"),
      ),
      Option(
        "dual_rounds",
        1,
        "rounds of the two parts in turn: each after the first routes the training inputs by "
        "the estimator, fine-tunes the experts on theirs and trains the estimator further",
        int,
        positive=True,
      ),
      Option(
        "dual_expert_epochs",
        0,
        "epochs each round fine-tunes an expert on its routed inputs (0: the experts stay)",
        int,
      ),
    ),
  ),
)
