"""``--method dual`` as a value (no JAX here: ``rsjax verify`` reads it)."""

from __future__ import annotations

from rsjax.claims import GAUSSIAN
from rsjax.dual._check import check_dual, parse_experts
from rsjax.runs.method import Method, Option, Training

__all__ = ["METHOD", "parse_experts"]


def _experts(text: str) -> str:
  """The ``type=`` of ``--dual-experts``: the text, once it parses (recorded as given)."""
  parse_experts(text)
  return text


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
  ),
  check=check_dual,
  noises=GAUSSIAN,
  columns=("sigma", "sigma_index", "estimator_radius"),
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
        "radius: the largest estimated radius",
        str,
        ("confident", "radius"),
      ),
      Option("dual_tau", 1.0, "the confident target's share of right draws", float),
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
