"""Where rsjax keeps what it can compute again (parsed datasets, compiled programs): one
rule for every cache, JAX-free."""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["cache_dir"]


def cache_dir(
  setting: str | None, name: str, environ: Mapping[str, str] = os.environ
) -> str | None:
  """The folder of cache ``name``: ``setting`` (a flag's or an environment variable's value),
  else ``$XDG_CACHE_HOME/rsjax/<name>`` (``~/.cache/rsjax/<name>``); None where ``setting`` is
  ``off``, ``none`` or empty."""
  if setting is not None and setting.strip().lower() in ("off", "none", ""):
    return None
  if setting:
    return setting
  base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "rsjax", name)
