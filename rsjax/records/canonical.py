"""Canonical JSON and its SHA-256 digests: what a run record binds.

A digest is of JSON written one way only (sorted keys, no spaces, no NaN), so the same value
always gives the same digest: the claim folded into a run's key
(``rsjax.records.spec.RunSpec.claim_digest``) and a model's configuration
(:func:`model_config_digest`). NumPy-free and JAX-free (``rsjax verify`` reads it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = [
  "MODEL_CONFIG_KEYS",
  "digest",
  "model_config_digest",
  "read_json",
  "unique_keys",
  "words",
]

#: The entries of a model's configuration (``config.json``) that define its function: it is
#: built as ``create_model(model, num_classes=..., input_shape=..., **model_kwargs)``.
MODEL_CONFIG_KEYS = ("model", "num_classes", "input_shape", "model_kwargs")


def model_config_digest(config: Mapping[str, Any]) -> str:
  """The SHA-256 (hex) of the canonical JSON of a configuration's :data:`MODEL_CONFIG_KEYS`
  (``model_kwargs`` absent reads as ``{}``): two models with the same parameters and this
  digest compute the same function."""
  core = {k: config.get(k) for k in MODEL_CONFIG_KEYS}
  core["model_kwargs"] = core["model_kwargs"] or {}
  core["input_shape"] = None if core["input_shape"] is None else list(core["input_shape"])
  return digest(core)


def digest(value: Any) -> str:
  """The SHA-256 (hex) of ``value`` as canonical JSON (sorted keys, no spaces, no NaN)."""
  text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
  return hashlib.sha256(text.encode()).hexdigest()


def words(hex_digest: str) -> tuple[int, ...]:
  """A hex digest as big-endian 32-bit words (what ``jax.random.fold_in`` takes)."""
  raw = bytes.fromhex(hex_digest)
  return tuple(int.from_bytes(raw[i : i + 4], "big") for i in range(0, len(raw), 4))


def unique_keys(pairs: list[tuple[str, Any]]) -> dict:
  """A JSON object whose keys are all different (``json.load``'s ``object_pairs_hook``)."""
  out = dict(pairs)
  if len(out) != len(pairs):
    twice = sorted({k for k, _ in pairs if sum(1 for j, _ in pairs if j == k) > 1})
    raise ValueError(f"the key {twice[0]!r} appears twice in one object")
  return out


def read_json(path: str) -> Any:
  """A JSON file whose objects have no key twice (which value would a reader see?).

  Raises:
    ValueError: not valid JSON, a key twice, or nested too deeply (one line each).
  """
  from rsjax.records._format import read_text

  text = read_text(path, "file")
  try:
    return json.loads(text, object_pairs_hook=unique_keys)
  except json.JSONDecodeError as e:
    raise ValueError(f"not valid JSON ({e})") from None
  except RecursionError:
    raise ValueError("nested too deeply") from None
