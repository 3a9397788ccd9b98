"""``--method ddrs`` as a value (no JAX here: ``rsjax verify`` reads it)."""

from __future__ import annotations

from rsjax.claims import GAUSSIAN
from rsjax.ddrs._check import check_ddrs
from rsjax.runs.method import Method, Option, Training

__all__ = ["METHOD"]


#: ``--method ddrs``: sigma optimized per input, CERTIFY at it, then the memory step.
METHOD = Method(
  "ddrs",
  "data-dependent sigma optimized per input, then the memory-based certification (DDRS)",
  "rsjax.ddrs._certify:DDRS",
  (
    Option("ddrs_steps", 100, "sigma ascent steps per input", int),
    Option("ddrs_lr", 1e-4, "sigma ascent step size", float),
    Option("ddrs_draws", 1, "noise draws per ascent step", int, positive=True),
    Option(
      "ddrs_memory",
      "on",
      "off: no memory, the radius is NOT a certificate",
      str,
      choices=("on", "off"),
    ),
  ),
  check=check_ddrs,
  noises=GAUSSIAN,
  columns=("sigma", "predict_mc", "radius_mc", "sound"),
  radius_columns={
    "radius_mc": "the Monte-Carlo radius before the memory: not the certificate of the "
    "memory's prediction",
  },
  ordered=True,
  training=Training(
    "rsjax.ddrs.training:train_job",
    "per-example sigma optimized during training (DDRS Algorithm 2); --sigma is sigma0",
    (
      Option("sigma_steps", 1, "DDRS: sigma ascent steps per batch", int),
      Option("sigma_lr", 1e-2, "DDRS: sigma ascent step size", float),
      Option("sigma_draws", 4, "DDRS: noise draws per ascent step", int, positive=True),
      Option(
        "sigma_param", "sigma", "DDRS: ascend sigma (paper) or log sigma", str, ("sigma", "log")
      ),
      Option("ddrs_warmup_epochs", 0, "DDRS: first epochs at the fixed sigma0", int),
    ),
  ),
)
