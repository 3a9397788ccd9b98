"""``--method ddrs`` as a value (no JAX here: ``rsjax verify`` reads it)."""

from __future__ import annotations

from rsjax.ddrs._check import check_ddrs
from rsjax.methods.base import Method, Option

__all__ = ["METHOD"]


METHOD = Method(
  "ddrs",
  "data-dependent sigma optimized per input, then the memory-based certification (DDRS)",
  "rsjax.ddrs._certifier:DDRSCertifier",
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
  columns=("sigma", "predict_mc", "radius_mc", "sound"),
  ordered=True,
)
