"""The checks of a run as a whole: the rows against the declared index range, the labels
and inputs against the dataset, and the view of the run the method checkers read."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from rsjax.claims import ANYTIME_RULE, Mismatch, budget_alphas, budget_looks
from rsjax.noise import lattice

if TYPE_CHECKING:
  from rsjax.data import Dataset
  from rsjax.records.io import CertifyResults
  from rsjax.records.spec import RunSpec
  from rsjax.runs.method import Method


#: What verify says of a record written before the claim was bound into the key.
UNBOUND = (
  "that the claim was fixed before the noise was drawn (an rsjax-run/2 record: its key does "
  "not bind the claim's digest)"
)


#: Why an unbound record is not verified unless asked (``accept_unbound``).
NOT_BOUND = (
  "an rsjax-run/2 record: its key does not bind its claim, and any rsjax-run/3 run can be "
  "rewritten as one with the same noise, so alpha, the multiclass radius and the declared "
  "range may have been chosen after the draw; certify it again with this rsjax, or accept "
  "it knowingly (rsjax verify --accept-unbound)"
)


def certificate_view(run: RunSpec) -> dict:
  """What the method checkers read of a run (``rsjax.records.spec.RunSpec``), in one dict.

  Everything here follows from the run's one record; nothing is read twice. ``path`` is
  the result file (a check may read a file the run names beside it) and ``unchecked`` a
  list a check appends to, one line for each thing it could not check here.
  """
  s = run.sampling
  out = {
    "path": run.out,
    "bound": run.claim_bound,
    "unchecked": [],
    "method": run.method,
    "settings": dict(run.options),
    "sampling": s.to_json(),
    "noise": {"family": run.noise_family, "name": s.noise, "norm": run.norm},
    "sigma": run.sigma,
    "multiclass": run.multiclass,
    "input_shape": list(run.data.input_shape),
    "num_classes": run.data.num_classes,
    "dataset": run.data.name,
    "details": run.details,
    "model": run.model.fingerprint,
  }
  budget = (run.details or {}).get("budget")
  if budget is not None and dict(budget).get("rule") == ANYTIME_RULE:
    out["budget"] = {**dict(budget), "grid": list(run.options.get("grid") or ())}
  elif budget is not None:
    b = dict(budget)
    looks = budget_looks(s.n, int(b["first"]), float(b["ratio"]))
    out["budget"] = {
      **b,
      "grid": list(run.options.get("grid") or ()),
      "looks": looks,
      "alphas": budget_alphas(s.alpha, len(looks), float(b["final_share"])),
    }
  return out


def check_rows_declared(run: RunSpec, res: CertifyResults) -> tuple[list[Mismatch], int]:
  """Rows outside the declared index range, and how many declared rows are missing.

  Returns:
    ``(mismatches, missing)``.
  """
  declared = run.indices()  # a range: membership is arithmetic, nothing is built
  have = {int(i) for i in res.idx}
  issues = [
    Mismatch(int(i), f"idx {int(i)} is not one of the run's declared indices ({_range(run)})")
    for i in res.idx
    if int(i) not in declared
  ]
  missing = len(declared) - sum(1 for i in have if i in declared)
  return issues, missing


def _range(run: RunSpec) -> str:
  d = run.data
  stop = d.size if d.stop < 0 else min(d.stop, d.size)
  return f"{d.name} {d.split}: {d.start} to {stop - 1} step {d.skip}, {len(run.indices())} inputs"


def split_issue(run: RunSpec) -> str | None:
  """Why the run's split is not one of its registry dataset's (``rsjax.data.DATASETS``), or
  None (a split it has, or a dataset verify does not know)."""
  from rsjax.data._registry import DATASETS

  splits = DATASETS.get(run.data.name)
  if run.data.file_sha256 is None and splits is not None and run.data.split not in splits:
    return (
      f"the run declares the split {run.data.split!r} of {run.data.name}, which has "
      f"{', '.join(splits)}"
    )
  return None


def load_dataset(run: RunSpec, data_dir: str | None) -> tuple[Dataset | None, str | None]:
  """The run's dataset split, or ``(None, why)`` when it cannot be loaded here."""
  try:
    from rsjax import data

    if run.data.file_sha256 is not None:
      return None, (
        f"the array file {run.data.name!r} supplied with the run (SHA-256 "
        f"{run.data.file_sha256[:16]}): verify loads registry datasets only; the audit "
        "loads the file and checks its SHA-256"
      )
    if run.data.images_sha256 is not None and data_dir is None and run.data.name in data.DATASETS:
      return None, (
        f"the run read {run.data.name} {run.data.split} from a folder (its images' SHA-256 "
        f"{run.data.images_sha256[:16]}): give that folder with --data-dir"
      )
    if run.data.images_sha256 is not None and run.data.name not in data.DATASETS:
      folder = data_dir or run.data.name  # an image folder named by its path
      return data.load(folder, run.data.split), None
    if run.data.name not in data.DATASETS:
      return None, f"dataset {run.data.name!r} is not one rsjax can load"
    return data.load(run.data.name, run.data.split, data_dir=data_dir), None
  except Exception as e:  # noqa: BLE001 -- any failure to load: say it and check the rest
    return None, f"dataset {run.data.name!r} ({run.data.split}) cannot be loaded here: " + (
      " ".join(str(e).split())[:200]
    )


def check_dataset_shape(run: RunSpec, ds: Dataset) -> list[Mismatch]:
  """The run's declared input shape, number of classes and size against the dataset."""
  issues: list[Mismatch] = []
  d = run.data
  if tuple(ds.input_shape) != tuple(d.input_shape):
    issues.append(
      Mismatch(
        -1,
        f"the run declares inputs of shape {list(d.input_shape)}, "
        f"{d.name} has {list(ds.input_shape)}",
      )
    )
  if int(ds.num_classes) != d.num_classes:
    issues.append(
      Mismatch(-1, f"the run declares {d.num_classes} classes, {d.name} has {ds.num_classes}")
    )
  if len(ds) != d.size:
    issues.append(
      Mismatch(-1, f"the run declares {d.size} inputs in {d.name} {d.split}, it has {len(ds)}")
    )
  return issues


def check_against_dataset(
  run: RunSpec, res: CertifyResults, recs: dict[int, dict], ds: Dataset
) -> list[Mismatch]:
  """The run's declared shape, classes and size, and every row's label and input
  fingerprint, against the dataset itself."""
  from rsjax.runs import record as record_lib

  d = run.data
  issues = check_dataset_shape(run, ds)
  if issues:
    return issues
  issues.extend(check_images(run, ds))
  named = _namer(ds)
  idx = np.asarray(res.idx, np.int64)
  inside = (idx >= 0) & (idx < len(ds))
  rows = np.flatnonzero(inside)
  for s in range(0, len(rows), 1024):
    part = rows[s : s + 1024]
    x, y = ds.get_batch(idx[part])
    x, y = np.asarray(x), np.asarray(y)
    for j, xi, yi in zip(part, x, y, strict=True):
      i = int(idx[j])
      if int(res.label[j]) != int(yi):
        issues.append(
          Mismatch(
            i, f"label {int(res.label[j])} in the file, {int(yi)} in {d.name} {d.split}{named(i)}"
          )
        )
        continue
      r = recs.get(i)
      if r is not None and r.get("input") != record_lib.input_fingerprint(xi):
        issues.append(
          Mismatch(
            i,
            f"the recorded input fingerprint is not that of {d.name} {d.split} input {i}{named(i)}",
          )
        )
  return issues


def alpha_words(run: RunSpec) -> str:
  """The level each row of ``run`` holds at, in words: the sampling's alpha, or for a run
  certified from a parent run the level its rows state (``details["alpha"]``: alpha_1 +
  alpha_2, which the recertify check derives again; on any other run it is not read)."""
  alpha = run.sampling.alpha
  stated = run.details.get("alpha") if isinstance(run.details, dict) else None
  if run.options.get("parent") and isinstance(stated, float) and stated != alpha:
    return f"{stated!r} (its own {alpha!r} and its parent's)"
  return repr(alpha)


def claim_line(run: RunSpec, words: Callable[[Any, Any], str] | None = None) -> str:
  """The claim verify checked, in one line: method, noise, sigma, N, alpha, the radius and
  the declared rows (``words(options, sampling)``, the method's ``claim_words``, in place of
  the noise, sigma, N, alpha and radius where it has them)."""
  s = run.sampling
  if words is not None:
    return (
      f"method {run.method}, {words(run.options, s)}, {len(run.indices())} rows ({_range(run)})"
    )
  budget = (run.details or {}).get("budget")
  rule = "" if not budget else f", budgeted ({budget.get('rule', 'looks')} rule)"
  radius = "multiclass radius" if run.multiclass else "binary radius"
  extra = [f"precision {s.precision}"] if s.precision != "float32" else []
  if s.pack != 1:
    extra.append(f"pack {s.pack}")
  return (
    f"method {run.method}, {run.noise_label} noise, sigma {run.sigma:g}, N0 {s.n0}, "
    f"N {s.n}{rule}, alpha {alpha_words(run)}, {radius}"
    + "".join(f", {e}" for e in extra)
    + f", {len(run.indices())} rows ({_range(run)})"
  )


def check_claim_digest(run: RunSpec) -> list[Mismatch]:
  """The claim digest the record states (``key.claim``) against the one its fields give."""
  if not run.claim_bound:
    return []
  stated = run.stated_claim
  want = run.claim_digest()
  if stated != want:
    return [
      Mismatch(
        -1,
        f"the record states the claim digest {stated!r}, its fields give {want}: the claim "
        "was edited after the noise was drawn (every audited row will differ)",
      )
    ]
  return []


def check_noise_table(run: RunSpec) -> list[Mismatch]:
  """The threshold table of sound 8-bit noise (``gaussian_8bit``), computed again from sigma,
  against the hash the run recorded (``details.noise_table``)."""
  if run.sampling.noise != "gaussian_8bit":
    return []
  want = lattice.table_hash(run.sigma)
  got = (run.details or {}).get("noise_table")
  if got != want:
    return [
      Mismatch(
        -1,
        f"the run records the threshold table {got!r}; sigma {run.sigma:g} gives {want!r}",
      )
    ]
  return []


def option_refusal(method: Method, options: Mapping[str, Any]) -> str | None:
  """Why a record's ``method.options`` are not options ``rsjax certify`` could have run
  with (None when they are): a name the method does not have, a value outside its choices,
  or a value its flag's parser would not give back (e.g. a radius grid ``"abc"``)."""
  known = {o.name: o for o in method.options}
  for name, value in options.items():
    o = known.get(name)
    if o is None:
      names = ", ".join(sorted(known)) or "none"
      return f"method.options.{name} is not an option of {method.name} (its options: {names})"
    if value is None and o.default is None:
      continue
    if value is None:
      return f"method.options.{name} is null; --{name.replace('_', '-')} never gives it"
    if type(value) is type(o.default) and value == o.default:
      continue
    if o.choices is not None and value not in o.choices:
      return f"method.options.{name} {value!r} is not one of {list(o.choices)}"
    text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    try:
      parsed = o.type(text)
    except (TypeError, ValueError) as e:
      return f"method.options.{name} {value!r} is not a value of --{name.replace('_', '-')}: {e}"
    # The value certify records is the parser's own: the same types (not 20 for 20.0).
    pairs = zip(parsed, value, strict=False) if isinstance(value, (list, tuple)) else ()
    if isinstance(value, (list, tuple)):
      same = len(parsed) == len(value) and all(type(a) is type(b) and a == b for a, b in pairs)
    else:
      same = type(parsed) is type(value) and parsed == value
    if not same:
      return f"method.options.{name} {value!r} is not a value of --{name.replace('_', '-')}"
  return None


def _namer(ds: Dataset) -> Callable[[int], str]:
  """``named(i)``: `` (its file)`` of input ``i`` of a folder dataset, else ``""``."""
  name_of = getattr(ds, "image_name", None)
  if name_of is None:
    return lambda i: ""
  return lambda i: f" ({name_of(i)})"


def images_words(run: RunSpec, ds: Dataset) -> str | None:
  """Which images a run read from a folder, in words (None for a dataset of another
  storage): the folder, how many, the first and last, their SHA-256."""
  d = run.data
  if d.images_sha256 is None:
    return None
  declared = run.indices()
  names, name_of = "", getattr(ds, "image_name", None)
  if name_of is not None and len(declared) and declared[-1] < len(ds):
    names = f": {name_of(declared[0])} to {name_of(declared[-1])}"
  return (
    f"{d.name} {d.split} read from the folder {getattr(ds, 'root', '?')}, "
    f"{len(declared)} images{names} (SHA-256 {d.images_sha256[:16]})"
  )


def check_images(run: RunSpec, ds: Dataset) -> list[Mismatch]:
  """Whether ``ds`` holds the images a run read from a folder: a folder, and the same
  names, labels and bytes of the declared images (``rsjax.data.images_sha256``)."""
  from rsjax import data

  d = run.data
  if d.images_sha256 is None:
    return []
  have = data.images_sha256(ds, run.indices())
  if have is None:
    return [
      Mismatch(
        -1,
        f"the run read {d.name} {d.split} from a folder, the dataset given here is not one "
        "(TFDS): give that folder (--data-dir)",
      )
    ]
  if have == d.images_sha256:
    return []
  return [
    Mismatch(
      -1,
      f"the folder {getattr(ds, 'root', '?')} is not the one the run read: the names, labels "
      f"and bytes of its {len(run.indices())} declared images have SHA-256 {have[:16]}, "
      f"the run's {d.images_sha256[:16]}",
    )
  ]
