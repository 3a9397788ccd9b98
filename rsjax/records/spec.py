"""A certify (or predict) run as one value: :class:`RunSpec`.

Everything a run's certificate claims is a field of one frozen value: the model (its
fingerprint and where it came from), the data (dataset, split, the declared index range,
input shape, number of classes), sigma and where it came from, the sampling settings (N0, N,
alpha, noise, precision), the method and its options, and the key (seed and derivation).
Built once (from flags by ``rsjax.app.launch``, or by library users such as
``rsjax.app.demo``), it is written as the one record of the run, ``<result file>.run.json``
(:func:`run_path`); resume, ``rsjax verify``, ``audit``, ``analyze`` and the demo read it
back (:meth:`RunSpec.read`). No field is stored twice, so what ``verify`` checks is what
``audit`` re-draws and what ``analyze`` prints. The record is NumPy-free JSON (no JAX, no
model code here); older records are refused in one line (:class:`RunFormatError`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from rsjax.records import canonical
from rsjax.records.sampling import RunSampling

__all__ = [
  "FORMAT",
  "KEY_DERIVATION",
  "UNBOUND_FORMAT",
  "NOISE_NORMS",
  "DataRef",
  "ModelRef",
  "RunFormatError",
  "RUN_SUFFIX",
  "RunSpec",
  "declared_indices",
  "run_path",
]

FORMAT = "rsjax-run/3"
#: The format before the claim was bound into the key: still read and verified, its claim
#: reported as not bound.
UNBOUND_FORMAT = "rsjax-run/2"
RUN_SUFFIX = ".run.json"

#: How the noise of row ``idx`` derives from the run's seed (``rsjax.engine.driver.run_certify``
#: and ``rsjax.sample_noise``): the claim's digest (:meth:`RunSpec.claim_digest`) is folded
#: into the key, so a claim edited after the noise was drawn makes every row draw other noise.
KEY_DERIVATION = (
  "K = jax.random.key(seed) folded with key.fold_in in order, then with the 8 words of "
  "key.claim (the claim digest: the SHA-256, in hex, of the canonical JSON of the record "
  "without key, versions, format, model.path, sigma.source and method.details; word i is "
  "bytes 4i to 4i+3, big-endian); "
  "selection sample j of row idx: fold_in(fold_in(fold_in(K, 0), idx), j); estimation: "
  "fold_in(fold_in(fold_in(K, 1), idx), j); Threefry-2x32 (jax default PRNG)"
)
#: The key derivation of ``rsjax-run/2`` records (no claim digest).
UNBOUND_KEY_DERIVATION = (
  "K = jax.random.key(seed) folded with key.fold_in in order; selection sample j "
  "of row idx: fold_in(fold_in(fold_in(K, 0), idx), j); estimation: "
  "fold_in(fold_in(fold_in(K, 1), idx), j); Threefry-2x32 (jax default PRNG)"
)
_DERIVATIONS = {FORMAT: KEY_DERIVATION, UNBOUND_FORMAT: UNBOUND_KEY_DERIVATION}

#: Record fields that are not part of the claim the key binds: the key itself, who wrote it,
#: where things were, how sigma was given, and the run-wide facts the method derives from the
#: rest (``rsjax audit`` rebuilds those and compares).
NOT_CLAIM = ("key", "versions", "format", "model.path", "sigma.source", "method.details")

#: ``--noise`` name -> (family, norm of the radius); ``rsjax.noise.NOISES`` agrees (a test
#: checks it). The record names the noise once; its family and norm follow from the name.
NOISE_NORMS = {
  "gaussian": ("gaussian", "l2"),
  "gaussian_fast": ("gaussian", "l2"),
  "laplace": ("laplace", "l1"),
  "uniform": ("uniform", "l1"),
  "uniform_l1": ("uniform", "l1"),
  "uniform_linf": ("uniform", "linf"),
  "gaussian_8bit": ("gaussian", "l2"),
}

#: Fields of the record that say where things were, which software ran or how sigma was
#: given, not what was certified: a resume may differ in them (a copied model, another
#: rsjax, ``--sigma`` given equal to the training sigma).
NOT_IDENTITY = ("versions", "model.path", "sigma.source", "key.claim")


class RunFormatError(ValueError):
  """A run record this rsjax cannot read (missing, older format, malformed)."""


def run_path(path: str | os.PathLike) -> str:
  """The run record kept next to a result file: ``<path>.run.json``."""
  return os.fspath(path) + RUN_SUFFIX


def declared_indices(
  size: int, start: int = 0, stop: int = -1, skip: int = 1, count: int = -1
) -> range:
  """Which rows: the dataset indices ``start, start + skip, ...`` below ``stop`` (-1: the
  split's end; Cohen et al.'s ``--max``), at most ``count`` of them (-1: all), as a
  ``range``: its length and membership cost nothing, however many indices a record claims.
  The one rule every path uses (``DataRef.indices``, the commands, the demo, the
  experiments).

  Raises:
    ValueError: ``skip < 1`` or ``start < 0``.
  """
  if skip < 1:
    raise ValueError(f"skip must be >= 1, got {skip}")
  if start < 0:
    raise ValueError(f"start must be >= 0, got {start}")
  end = size if stop is None or stop < 0 else min(size, stop)
  rows = range(start, end, skip)
  return rows if count is None or count < 0 else rows[:count]


@dataclasses.dataclass(frozen=True)
class ModelRef:
  """The model a run certified.

  Attributes:
    fingerprint: ``rsjax.runs.runner.fingerprint`` of the parameters certified (with
      a denoiser: of the composed parameters, denoiser included).
    architecture: its architecture name (``rsjax.models``), if known.
    source: ``"model_dir"`` (``rsjax train`` / ``convert``), ``"torch_checkpoint"``
      or ``"library"`` (built in code).
    path: where it was loaded from (not part of the run's identity).
    torch_arch: ``--torch-arch`` of a PyTorch checkpoint.
    normalize: ``--normalize`` of a PyTorch checkpoint.
    denoiser: the denoiser directory of denoised smoothing (the fingerprint
      covers its weights; a resume names it when it differs).
    denoiser_config: ``rsjax.models.denoise.workdir.denoiser_digest`` of the denoiser's
      settings, architecture, schedule and timestep (what its weights do not show).
    resize: ``"HxW"``: the classifier saw its inputs resized (bicubic, antialiased) to H x W.
    config: ``rsjax.records.canonical.model_config_digest`` of the configuration the model was
      built from (the fingerprint covers the parameters only; static constants such as a
      normalization live in the configuration), or None (a run written before it was
      recorded).
  """

  fingerprint: str
  architecture: str | None = None
  source: str = "library"
  path: str | None = None
  torch_arch: str | None = None
  normalize: str | None = None
  denoiser: str | None = None
  denoiser_config: str | None = None
  resize: str | None = None
  config: str | None = None


@dataclasses.dataclass(frozen=True)
class DataRef:
  """The inputs a run certified: a split of a dataset and the declared index range.

  Attributes:
    name, split: the dataset's name (``rsjax.data.load``) and its split.
    size, input_shape, num_classes: the inputs in the split, the shape of one, C.
    start, stop, skip: the declared indices ``start, start + skip, ...`` below
      ``stop`` (-1: the split's end); a complete run has exactly these rows.
    file_sha256: for a dataset given as an array file (``name`` its path), the SHA-256 of
      its contents: the run's author supplied the inputs, and this binds which.
    images_sha256: for a dataset read from a folder, the SHA-256 of its declared images'
      indices, names, labels and bytes (``rsjax.data.images_sha256``).
  """

  name: str
  split: str
  size: int
  input_shape: tuple[int, ...]
  num_classes: int
  start: int = 0
  stop: int = -1
  skip: int = 1
  file_sha256: str | None = None
  images_sha256: str | None = None

  def indices(self) -> range:
    """The declared dataset indices, in order (a ``range``)."""
    return declared_indices(self.size, self.start, self.stop, self.skip)

  def differences(self, other: DataRef, *, rows: bool = False) -> list[str]:
    """The fields (of dataset, split, size, array file; range too with ``rows``) that differ."""
    fields = ("name", "split", "size", "file_sha256") + (("start", "stop", "skip") if rows else ())
    return [f for f in fields if getattr(self, f) != getattr(other, f)]


@dataclasses.dataclass(frozen=True)
class RunSpec:
  """One certify or predict run (module docstring).

  Attributes:
    model: the model certified.
    data: the inputs certified.
    sigma: the noise level (the method's base level: UCAN scales it by its
      pattern, IDRS and DDRS compute per-input sigma from it).
    sigma_source: ``"flag"`` (given), ``"model"`` (the training sigma) or
      ``"library"``.
    sampling: the sampling settings that change counts (``n0``, ``n``, ``alpha``, the
      noise by its name in :data:`NOISE_NORMS`, the precision, the packing).
    method: the method's name (``rsjax.methods.METHODS``).
    options: the method's own options.
    multiclass: the multiclass radius with simultaneous bounds.
    details: run-wide facts of the method its radius depends on
      (``rsjax.runs.method.Certifier.details``; a budgeted run's schedule is its
      ``"budget"``: ``first``, ``ratio``, ``final_share``, ``stop_alpha``), or None.
    seed: the seed of ``jax.random.key``.
    key_fold_in: integers the key is folded with, in order, before certifying.
    command: ``"certify"`` or ``"predict"``.
    versions: software versions that wrote the run (not part of its identity).
    out: the result file (the record lives beside it, so it is not written).
    format: the record's format: :data:`FORMAT` (the claim is bound into the key), or
      :data:`UNBOUND_FORMAT` for a record read from an older rsjax.
    stated_claim: the claim digest a record read back states (``key.claim``; verify
      compares it with :meth:`claim_digest`), None for a run built here.
  """

  model: ModelRef
  data: DataRef
  sigma: float
  sampling: RunSampling
  sigma_source: str = "library"
  method: str = "cohen"
  options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  multiclass: bool = False
  details: Mapping[str, Any] | None = None
  seed: int = 0
  key_fold_in: tuple[int, ...] = ()
  command: str = "certify"
  versions: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  out: str | None = dataclasses.field(default=None, compare=False)
  format: str = FORMAT
  stated_claim: Any = dataclasses.field(default=None, compare=False)

  def __post_init__(self) -> None:
    noise = self.sampling.noise
    if noise not in NOISE_NORMS:
      raise RunFormatError(f"run: unknown noise {noise!r} (known: {sorted(NOISE_NORMS)})")
    if not (isinstance(self.sigma, (int, float)) and self.sigma > 0):
      raise RunFormatError(f"run: sigma must be a number > 0, got {self.sigma!r}")

  # ------------------------------------------------------------------- derived

  @property
  def noise_family(self) -> str:
    return NOISE_NORMS[self.sampling.noise][0]

  @property
  def norm(self) -> str:
    """The norm of the radius (``l2``, ``l1``, ``linf``)."""
    return NOISE_NORMS[self.sampling.noise][1]

  @property
  def noise_label(self) -> str:
    """The noise and the norm of its radius, as ``analyze`` labels a run: ``"gaussian (l2)"``;
    sound 8-bit noise says so: ``"gaussian_8bit (l2, sound 8-bit)"``."""
    sound = ", sound 8-bit" if self.sampling.noise == "gaussian_8bit" else ""
    return f"{self.sampling.noise} ({self.norm}{sound})"

  def indices(self) -> range:
    """The declared dataset indices of the run (a ``range``)."""
    return self.data.indices()

  # ------------------------------------------------------------------- the claim and the key

  @property
  def claim_bound(self) -> bool:
    """Whether the run's noise was drawn with its claim's digest in the key."""
    return self.format == FORMAT

  def claim(self) -> dict:
    """What the run claims, as JSON: the record without :data:`NOT_CLAIM`."""
    return _claim_of(self.to_json())

  def claim_digest(self) -> str:
    """The claim's digest folded into the key: the SHA-256 (hex) of :meth:`claim` as
    canonical JSON (sorted keys, no spaces). All 256 bits are folded in, so a claim chosen
    after the draw must match an honest run's key (64 bits of Threefry state) by search."""
    return canonical.digest(self.claim())

  def key_path(self) -> tuple[int, ...]:
    """The integers the run's ``jax.random.key(seed)`` is folded with, in order:
    ``key.fold_in``, then the claim digest (not for an unbound, ``rsjax-run/2``, record)."""
    bound = canonical.words(self.claim_digest()) if self.claim_bound else ()
    return (*self.key_fold_in, *bound)

  # ------------------------------------------------------------------- JSON

  def to_json(self) -> dict:
    """The run record (a JSON object): every field once, ``out`` left out."""
    model = {k: v for k, v in dataclasses.asdict(self.model).items() if v is not None}
    data = {k: v for k, v in dataclasses.asdict(self.data).items() if v is not None}
    data["input_shape"] = [int(d) for d in self.data.input_shape]
    method = {
      "name": self.method,
      "options": _plain(self.options),
      "multiclass": bool(self.multiclass),
    }
    if self.details is not None:
      method["details"] = _plain(self.details)
    key = {
      "seed": int(self.seed),
      "fold_in": [int(k) for k in self.key_fold_in],
      "derivation": _DERIVATIONS.get(self.format, KEY_DERIVATION),
    }
    rec = {
      "format": self.format,
      "command": self.command,
      "model": model,
      "data": data,
      "sigma": {"value": float(self.sigma), "source": self.sigma_source},
      "sampling": _plain(self.sampling.to_json()),
      "method": method,
      "key": key,
      "versions": _plain(self.versions),
    }
    if self.claim_bound:  # stated for readers; verify derives it again
      key["claim"] = canonical.digest(_claim_of(rec))
    return rec

  @classmethod
  def from_json(cls, rec: Mapping, out: str | None = None) -> RunSpec:
    """The run of a record (:meth:`to_json`).

    Raises:
      RunFormatError: a record of another format, or a malformed one: a field that is not
        what it should be (an integer that is no JSON integer, a size beyond
        ``rsjax.records.limits``) is named.
    """
    from rsjax.records import limits

    where = f"run record of {out!r}" if out else "run record"
    if not isinstance(rec, Mapping) or rec.get("format") not in _DERIVATIONS:
      fmt = rec.get("format") if isinstance(rec, Mapping) else None
      raise RunFormatError(
        f"{where} is not a {FORMAT} record (format {fmt!r}): written by an older rsjax or "
        "by hand; certify the run again with this rsjax (--overwrite)"
      )
    try:
      limits.check_record_shape(rec)  # the entries certify writes, and their types
      limits.check_run_record(rec)  # the numbers, before anything is built from them
      m, d, mt, k = rec["model"], rec["data"], rec["method"], rec["key"]
      if k.get("derivation") != _DERIVATIONS[rec["format"]]:
        raise RunFormatError(f"{where}: unknown key derivation {k.get('derivation')!r}")
      data = DataRef(
        name=str(d["name"]),
        split=str(d["split"]),
        size=int(d["size"]),
        input_shape=tuple(int(v) for v in d["input_shape"]),
        num_classes=int(d["num_classes"]),
        start=int(d["start"]),
        stop=int(d["stop"]),
        skip=int(d["skip"]),
        **{k: d.get(k) for k in ("file_sha256", "images_sha256")},
      )
      if not data.name or data.skip < 1 or data.start < 0 or data.size < 0 or data.num_classes < 1:
        raise RunFormatError(f"{where}: impossible data range {d}")
      limits.check_model_fields(m, bound=rec["format"] == FORMAT)
      return cls(
        model=ModelRef(
          **{f.name: m.get(f.name) for f in dataclasses.fields(ModelRef) if f.name in m}
        ),
        data=data,
        sigma=float(rec["sigma"]["value"]),
        sigma_source=str(rec["sigma"]["source"]),
        sampling=RunSampling.from_json(rec["sampling"]),
        method=str(mt["name"]),
        options=dict(mt.get("options") or {}),
        multiclass=bool(mt.get("multiclass", False)),
        details=mt.get("details"),
        seed=int(k["seed"]),
        key_fold_in=tuple(int(v) for v in k.get("fold_in", ())),
        command=str(rec["command"]),
        versions=dict(rec.get("versions") or {}),
        out=out,
        format=rec["format"],
        stated_claim=k.get("claim"),
      )
    except RunFormatError:
      raise
    except limits.FieldError as e:
      raise RunFormatError(f"{where}: {e}") from None
    except KeyError as e:
      raise RunFormatError(f"{where} is malformed (no field {e})") from None
    except (TypeError, ValueError, AttributeError) as e:
      raise RunFormatError(f"{where} is malformed ({e})") from None

  def identity(self) -> dict:
    """The record without the fields that do not change the rows (:data:`NOT_IDENTITY`)."""
    rec = self.to_json()
    for name in NOT_IDENTITY:
      *parents, leaf = name.split(".")
      d = rec
      for k in parents:
        d = d[k]
      d.pop(leaf, None)
    return rec

  # ------------------------------------------------------------------- files

  def write(self, path: str | os.PathLike | None = None) -> None:
    """Writes the run record next to result file ``path`` (default :attr:`out`), atomically."""
    from rsjax.records._durable import atomic_write_text

    target = run_path(path if path is not None else self.out)
    atomic_write_text(target, json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n")

  @classmethod
  def read(cls, path: str | os.PathLike) -> RunSpec:
    """The run of result file ``path`` (from ``<path>.run.json``).

    Raises:
      RunFormatError: no run record, or one this rsjax cannot read.
    """
    p = os.fspath(path)
    rec_path = run_path(p)
    if not os.path.exists(rec_path):
      raise RunFormatError(
        f"{p!r} has no run record ({os.path.basename(rec_path)}): certify it with this rsjax"
      )
    try:
      rec = canonical.read_json(rec_path)
    except ValueError as e:
      raise RunFormatError(f"run record {rec_path!r}: {e}") from None
    return cls.from_json(rec, out=p)


def _claim_of(rec: Mapping) -> dict:
  """A run record (JSON) without the fields of :data:`NOT_CLAIM` (a copy)."""
  out = json.loads(json.dumps(rec))
  for name in NOT_CLAIM:
    *parents, leaf = name.split(".")
    d = out
    for k in parents:
      d = d.get(k, {})
    d.pop(leaf, None)
  return out


def _plain(v):
  """``v`` as plain JSON values (tuples -> lists, NumPy scalars -> Python)."""
  if isinstance(v, Mapping):
    return {str(k): _plain(u) for k, u in v.items()}
  if isinstance(v, (list, tuple)):
    return [_plain(u) for u in v]
  if hasattr(v, "item") and not isinstance(v, (str, bytes)):
    return v.item()
  return v
