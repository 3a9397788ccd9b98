"""Strict, bounded parsing of a run's files: the limits no honest run exceeds, and the
readers of integers and numbers that refuse anything else in one line.

Every integer read from text (a result file's ``idx``, ``label``, ``predict``, a count's
class in ``.cert.jsonl``) is ASCII digits: no sign but a leading ``-``, no leading zeros, no
underscores, no other script's digits (Python's ``int()`` reads ``"1_0"``, ``"١٠"`` and
``"１０"`` as 10; rsjax and Cohen et al.'s scripts write none of them). Every integer of a
run record is a JSON integer (not ``1000.0``, ``"1000"`` or ``true``), every number a finite
JSON number. Sizes are bounded before anything is built from them:

====================  ==================  ==============================================
limit                 value               why
====================  ==================  ==============================================
:data:`MAX_SIZE`      2^31 - 1            inputs in a split (ImageNet's val: 50,000);
                                          dataset indices fit int32
:data:`MAX_ROWS`      2^24 (16,777,216)   declared rows of one run (all of ImageNet-21k:
                                          14.2M); ``rsjax audit`` builds an array of them
:data:`MAX_SAMPLES`   2^31 - 1            N0, N and any count: the engine counts in int32
:data:`MAX_CLASSES`   2^16 (65,536)       classes (ImageNet-21k: 21,841); verify keeps
                                          rows x classes counts
:data:`MAX_INPUT`     2^31 - 1            values in one input (product of input_shape),
                      in 1 to 8 dims      e.g. 3 x 224 x 224 = 150,528
:data:`MAX_LOOKS`     10,000              looks of a budgeted schedule (the default:
                                          a dozen)
====================  ==================  ==============================================

Standard library only: ``rsjax verify`` imports it without NumPy or JAX.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
  "FieldError",
  "MAX_CLASSES",
  "MAX_INDEX",
  "MAX_INPUT",
  "MAX_INPUT_DIMS",
  "MAX_LOOKS",
  "MAX_ROWS",
  "MAX_SAMPLES",
  "MAX_SIZE",
  "check_run_record",
  "class_key",
  "float_text",
  "int_text",
  "json_int",
  "json_number",
  "shown",
]

MAX_SIZE = 2**31 - 1
MAX_INDEX = MAX_SIZE - 1
MAX_ROWS = 2**24
MAX_SAMPLES = 2**31 - 1
MAX_CLASSES = 2**16
MAX_INPUT = 2**31 - 1
MAX_INPUT_DIMS = 8
MAX_LOOKS = 10_000
#: ``jax.random.key`` takes a signed 64-bit seed (2**63 overflows); ``fold_in`` a 32-bit
#: unsigned integer.
SEED_RANGE = (-(2**63), 2**63 - 1)
#: The entries a record's ``sampling`` may hold: ``rsjax.Sampling``'s recorded fields
#: (``rsjax.records.sampling.RunSampling``; a test keeps them equal). Any other
#: entry would be claimed, and hashed into the key, without meaning anything.
SAMPLING_KEYS = frozenset({"n0", "n", "alpha", "noise", "compute_dtype", "precision", "pack"})
PACKS = (1, 2, 4)
#: How a run's sigma was given (``rsjax.records.spec.RunSpec.sigma_source``).
SIGMA_SOURCES = ("flag", "model", "library")
#: The packages a run record names the versions of (``rsjax.runs.record.versions``), and
#: ``batch``: the engine batch that ran and how it was chosen (speed only, as the versions).
VERSION_KEYS = frozenset({"rsjax", "numpy", "scipy", "jax", "jaxlib", "batch"})
#: Where a run's model came from (``rsjax.records.spec.ModelRef.source``).
MODEL_SOURCES = ("model_dir", "torch_checkpoint", "library")
#: The fields of a record's ``model`` (``rsjax.records.spec.ModelRef``; a test keeps them equal).
MODEL_FIELDS = frozenset(
  "fingerprint architecture source path torch_arch normalize denoiser denoiser_config resize "
  "config".split()
)
#: The compute dtype each precision runs in (``rsjax.engine.precision``; None: the parameters'
#: own, float32): what a record's ``sampling.compute_dtype`` says beside its precision (a test
#: keeps them equal).
COMPUTE_DTYPE_OF = {"float32": None, "tf32": None, "bfloat16": "bfloat16"}
#: The compute dtypes a record may name.
COMPUTE_DTYPES = tuple(dict.fromkeys(COMPUTE_DTYPE_OF.values()))
FOLD_IN_RANGE = (0, 2**32 - 1)

# An integer as rsjax and Cohen et al. write it: ASCII, "0" or no leading zero, at most 19
# digits (so that int() never sees a long string).
_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,18})\Z", re.ASCII)
# A decimal float as repr() and "{:.3}" write it: ASCII, no "inf"/"nan", no underscores.
_FLOAT = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]{1,4})?\Z", re.ASCII)
# A class of a sparse count, {class: count}: as int_text, >= 0.
_CLASS = re.compile(r"(?:0|[1-9][0-9]{0,8})\Z", re.ASCII)


class FieldError(ValueError):
  """A field that is not what its reader expects (the message names it)."""


def shown(value: Any, width: int = 40) -> str:
  """``value`` as its file shows it (JSON for records, ``repr`` for text), cut to ``width``."""
  try:
    text = repr(value) if isinstance(value, str) else json.dumps(value)
  except (TypeError, ValueError):
    text = repr(value)
  return text if len(text) <= width else text[: width - 3] + "..."


def int_text(text: str, lo: int, hi: int) -> int:
  """The integer ``text`` writes in ASCII digits (optionally ``-``, no leading zeros), in
  ``[lo, hi]``.

  Raises:
    ValueError: anything else (the caller names the field).
  """
  if not (_INT.match(text) and lo <= int(text) <= hi):
    raise ValueError(text)
  return int(text)


def float_text(text: str, lo: float = -math.inf) -> float:
  """The finite number ``text`` writes in ASCII decimal notation, ``>= lo``.

  Raises:
    ValueError: anything else (``inf``, ``nan``, ``1e999``, other scripts' digits).
  """
  v = float(text) if _FLOAT.match(text) else math.nan
  if not (math.isfinite(v) and v >= lo):
    raise ValueError(text)
  return v


def class_key(key: object, num_classes: int) -> int | None:
  """The class of a sparse count's key (ASCII digits, below ``num_classes``), or None."""
  if not (isinstance(key, str) and _CLASS.match(key)):
    return None
  c = int(key)
  return c if c < num_classes else None


def json_int(value: object, name: str, lo: int, hi: int) -> int:
  """``value`` if it is a JSON integer in ``[lo, hi]``.

  Raises:
    FieldError: naming ``name`` and what was expected.
  """
  if isinstance(value, bool) or not (isinstance(value, int) and lo <= value <= hi):
    raise FieldError(f"{name} must be a JSON integer in [{lo}, {hi}], got {shown(value)}")
  return int(value)


def json_number(
  value: object, name: str, lo: float, hi: float = math.inf, *, open_lo: bool = True
) -> float:
  """``value`` if it is a finite JSON number above ``lo`` (``>= lo`` unless ``open_lo``)
  and below ``hi``.

  Raises:
    FieldError: naming ``name`` and what was expected.
  """
  ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
  if ok:
    ok = (value > lo if open_lo else value >= lo) and value < hi  # type: ignore[operator]
  if not ok:
    what = f"{'(' if open_lo else '['}{lo:g}, {hi:g})"
    raise FieldError(f"{name} must be a finite JSON number in {what}, got {shown(value)}")
  return float(value)  # type: ignore[arg-type]


def _get(section: object, section_name: str, key: str) -> object:
  if not isinstance(section, Mapping):
    raise FieldError(f"{section_name} must be a JSON object, got {shown(section)}")
  if key not in section:
    raise FieldError(f"{section_name}.{key} is missing")
  return section[key]


def _one_of(value: object, name: str, choices: tuple) -> object:
  """``value`` if it is one of ``choices``.

  Raises:
    FieldError: naming ``name`` and the choices.
  """
  if value not in choices:
    raise FieldError(f"{name} must be one of {list(choices)}, got {shown(value)}")
  return value


def _count_looks(n_max: int, first: int, ratio: float) -> int:
  """How many looks ``rsjax.claims.budget_looks`` makes, counting to :data:`MAX_LOOKS` + 1."""
  count, n = 0, min(first, n_max)
  while n < n_max and count <= MAX_LOOKS:
    count += 1
    n = max(n + 1, math.ceil(min(n * ratio, n_max)))
  return count + 1


def check_run_record(rec: Mapping) -> None:
  """Checks the numbers of a run record (``rsjax.records.spec.RunSpec.to_json``) before anything
  is built from them: integers are JSON integers, numbers finite, sizes within the limits
  (module docstring), the declared rows at most :data:`MAX_ROWS`.

  Raises:
    FieldError: naming the first field that is not what it should be.
  """
  d = rec.get("data")
  size = json_int(_get(d, "data", "size"), "data.size", 0, MAX_SIZE)
  start = json_int(_get(d, "data", "start"), "data.start", 0, MAX_SIZE)
  stop = json_int(_get(d, "data", "stop"), "data.stop", -1, MAX_SIZE)
  skip = json_int(_get(d, "data", "skip"), "data.skip", 1, MAX_SIZE)
  json_int(_get(d, "data", "num_classes"), "data.num_classes", 1, MAX_CLASSES)
  shape = _get(d, "data", "input_shape")
  if not (isinstance(shape, list) and 1 <= len(shape) <= MAX_INPUT_DIMS):
    raise FieldError(
      f"data.input_shape must be a list of 1 to {MAX_INPUT_DIMS} JSON integers, got {shown(shape)}"
    )
  total = 1
  for i, v in enumerate(shape):
    total *= json_int(v, f"data.input_shape[{i}]", 1, MAX_INPUT)
  if total > MAX_INPUT:
    raise FieldError(f"data.input_shape {shown(shape)} has {total} values, more than {MAX_INPUT}")
  rows = len(range(start, size if stop < 0 else min(size, stop), skip))
  if rows > MAX_ROWS:
    raise FieldError(
      f"data declares {rows} rows (start {start}, stop {stop}, skip {skip} of size {size}), "
      f"more than the {MAX_ROWS} rows a run may declare"
    )
  s = rec.get("sampling")
  n_max = json_int(_get(s, "sampling", "n"), "sampling.n", 1, MAX_SAMPLES)
  json_int(_get(s, "sampling", "n0"), "sampling.n0", 1, MAX_SAMPLES)
  json_number(_get(s, "sampling", "alpha"), "sampling.alpha", 0.0, 1.0)
  other = sorted(set(s) - SAMPLING_KEYS)
  if other:
    raise FieldError(
      f"sampling.{other[0]} is not a sampling setting (a record's sampling holds "
      f"{', '.join(sorted(SAMPLING_KEYS))})"
    )
  dtype = _one_of(s.get("compute_dtype"), "sampling.compute_dtype", COMPUTE_DTYPES)
  precision = s.get("precision", "float32")
  if precision in COMPUTE_DTYPE_OF and dtype != COMPUTE_DTYPE_OF[precision]:
    raise FieldError(
      f"sampling.compute_dtype {shown(dtype)} is not what precision {precision!r} runs in "
      f"({shown(COMPUTE_DTYPE_OF[precision])})"
    )
  if "pack" in s and not (type(s["pack"]) is int and s["pack"] in PACKS):
    raise FieldError(
      f"sampling.pack must be one of {PACKS} (a JSON integer), got {shown(s['pack'])}"
    )
  json_number(_get(rec.get("sigma"), "sigma", "value"), "sigma.value", 0.0)
  k = rec.get("key")
  json_int(_get(k, "key", "seed"), "key.seed", *SEED_RANGE)
  fold_in = k.get("fold_in", []) if isinstance(k, Mapping) else []
  if not isinstance(fold_in, list):
    raise FieldError(f"key.fold_in must be a list of JSON integers, got {shown(fold_in)}")
  for i, v in enumerate(fold_in):
    json_int(v, f"key.fold_in[{i}]", *FOLD_IN_RANGE)
  mt = rec.get("method")
  details = mt.get("details") if isinstance(mt, Mapping) else None
  if details is not None and not isinstance(details, Mapping):
    raise FieldError(f"method.details must be a JSON object, got {shown(details)}")
  budget = details.get("budget") if isinstance(details, Mapping) else None
  if budget is not None and not isinstance(budget, Mapping):
    raise FieldError(f"method.details.budget must be a JSON object, got {shown(budget)}")
  if isinstance(budget, Mapping):  # both rules record first and ratio
    # Their ranges are the method checks' (a mismatch); here: numbers, and few enough looks.
    first = json_int(budget.get("first"), "method.details.budget.first", -MAX_SAMPLES, MAX_SAMPLES)
    ratio = json_number(budget.get("ratio"), "method.details.budget.ratio", -math.inf)
    looks = _count_looks(n_max, first, ratio)
    if looks > MAX_LOOKS:
      raise FieldError(
        f"method.details.budget: first {first}, ratio {ratio!r} and N {n_max} make more "
        f"than {MAX_LOOKS} looks"
      )


_HEX64 = re.compile(r"[0-9a-f]{64}")
_SIZE = re.compile(r"[1-9][0-9]{0,4}x[1-9][0-9]{0,4}")


def check_model_fields(m: Mapping, *, bound: bool = False) -> None:
  """A record's ``model`` holds ``rsjax.records.spec.ModelRef``'s fields only, and the PyTorch
  ones only for a PyTorch checkpoint (else they would be claimed, and hashed, meaning
  nothing).

  Raises:
    FieldError: naming the first field that is not what it should be.
  """
  other = sorted(set(m) - MODEL_FIELDS)
  if other:
    raise FieldError(f"model.{other[0]} is not a model field ({', '.join(sorted(MODEL_FIELDS))})")
  _one_of(m.get("source", "library"), "model.source", MODEL_SOURCES)
  config = m.get("config")
  if bound and config is None and m.get("source") != "library":
    raise FieldError(
      "model.config is missing: a bound run (rsjax-run/3) of a loaded model names the digest "
      "of the configuration it was built from"
    )
  if config is not None and not (isinstance(config, str) and _HEX64.fullmatch(config)):
    raise FieldError(f"model.config must be a SHA-256 in hex, got {shown(config)}")
  _check_denoiser_fields(m, bound)
  resize = m.get("resize")
  if resize is not None and not (isinstance(resize, str) and _SIZE.fullmatch(resize)):
    raise FieldError(f"model.resize must be 'HxW' (e.g. '224x224'), got {resize!r}")
  if m.get("source") != "torch_checkpoint":
    for name in ("torch_arch", "normalize"):
      if m.get(name) is not None:
        raise FieldError(
          f"model.{name} is set, but the model is not a PyTorch checkpoint "
          f"(source {m.get('source')!r})"
        )


def _check_denoiser_fields(m: Mapping, bound: bool) -> None:
  """A denoised run names its denoiser's settings digest (a bound run must), and only it."""
  digest = m.get("denoiser_config")
  if m.get("denoiser") is None:
    if digest is not None:
      raise FieldError("model.denoiser_config is set, but the run names no denoiser")
    return
  if bound and digest is None:
    raise FieldError(
      "model.denoiser_config is missing: a bound run (rsjax-run/3) of a denoiser names the "
      "digest of its settings"
    )
  if digest is not None and not (isinstance(digest, str) and _HEX64.fullmatch(digest)):
    raise FieldError(f"model.denoiser_config must be a SHA-256 in hex, got {shown(digest)}")


#: The entries of each part of a run record (``rsjax.records.spec.RunSpec.to_json``; a test
#: keeps them equal) and the JSON type of the ones a reader reads as text or a flag. An entry
#: certify never writes would be claimed, and hashed, without meaning anything.
RECORD_SHAPE: dict[str, frozenset[str]] = {
  "": frozenset("format command model data sigma sampling method key versions".split()),
  "data": frozenset(
    "name split size input_shape num_classes start stop skip file_sha256 images_sha256".split()
  ),
  "sigma": frozenset({"value", "source"}),
  "method": frozenset({"name", "options", "multiclass", "details"}),
  "key": frozenset({"seed", "fold_in", "derivation", "claim"}),
}
_TYPES: tuple[tuple[str, str, type], ...] = (
  ("", "command", str),
  ("data", "name", str),
  ("data", "split", str),
  ("sigma", "source", str),
  ("data", "file_sha256", str),
  ("data", "images_sha256", str),
  ("method", "name", str),
  ("method", "multiclass", bool),
  ("method", "options", dict),
)


def _check_images(d: Mapping) -> None:
  """A folder dataset's images' SHA-256 is one (``rsjax.data.images_sha256``)."""
  digest = d.get("images_sha256")
  if digest is not None and not _HEX64.fullmatch(str(digest)):
    raise FieldError(f"data.images_sha256 must be a SHA-256 in hex, got {shown(digest)}")


def check_record_shape(rec: Mapping) -> None:
  """A run record holds the entries certify writes, no other, and its text and flags are
  JSON strings and booleans (``"false"`` is not false).

  Raises:
    FieldError: naming the first entry that is not what it should be.
  """
  for part, names in RECORD_SHAPE.items():
    section = rec if not part else rec.get(part)
    if not isinstance(section, Mapping):
      raise FieldError(f"{part} must be a JSON object, got {shown(section)}")
    other = sorted(set(section) - names)
    if other:
      where = f"{part}.{other[0]}" if part else other[0]
      raise FieldError(f"{where} is not an entry of a run record ({', '.join(sorted(names))})")
  d = rec["data"]
  named_file = isinstance(d.get("name"), str) and d["name"].lower().endswith(".npz")
  if rec.get("format") == "rsjax-run/3" and named_file and d.get("file_sha256") is None:
    raise FieldError(
      "data.file_sha256 is missing: a bound run of an array-file dataset names the SHA-256 "
      "of the file's contents"
    )
  if d.get("file_sha256") is not None and not _HEX64.fullmatch(str(d["file_sha256"])):
    raise FieldError(f"data.file_sha256 must be a SHA-256 in hex, got {shown(d['file_sha256'])}")
  _check_images(d)
  _one_of(rec["sigma"].get("source"), "sigma.source", SIGMA_SOURCES)
  versions = rec.get("versions", {})
  if not (
    isinstance(versions, Mapping)
    and set(versions) <= VERSION_KEYS
    and all(v is None or isinstance(v, str) for v in versions.values())
  ):
    raise FieldError(
      f"versions must map {', '.join(sorted(VERSION_KEYS))} to version strings, "
      f"got {shown(versions)}"
    )
  for part, name, kind in _TYPES:
    section = rec if not part else rec[part]
    value = section.get(name)
    if name in section and type(value) is not kind:
      where = f"{part}.{name}" if part else name
      raise FieldError(f"{where} must be a JSON {kind.__name__}, got {shown(value)}")
