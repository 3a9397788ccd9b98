"""What the benchmark commands share."""

from __future__ import annotations

import json
import os

from rsjax.runs.io import atomic_write_text


def dump_json(path: str | None, obj) -> None:
  """Writes ``obj`` as indented JSON to ``path`` (its folder created, the file replaced whole);
  nothing when ``path`` is None (no ``--json``)."""
  if not path:
    return
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  atomic_write_text(path, json.dumps(obj, indent=1))
