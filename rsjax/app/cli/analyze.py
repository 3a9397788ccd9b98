"""``rsjax analyze``: tables and plots from certify result files."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import numpy as np

from rsjax.app.cli._args import CliError

__all__ = ["HELP", "add_arguments", "run", "plot_title"]

HELP = "tables and plots from certify result files"


def add_arguments(p: argparse.ArgumentParser) -> None:
  """The flags of ``rsjax analyze``."""
  p.add_argument("files", nargs="+", help="certify result files")
  p.add_argument(
    "--labels",
    nargs="+",
    default=None,
    help="one name per file for the table and the plot (default: file names)",
  )
  p.add_argument(
    "--radii",
    nargs="+",
    type=float,
    default=[0.0, 0.25, 0.5, 0.75, 1.0],
    help="radii of the table's columns",
  )
  p.add_argument("--format", default="text", choices=["text", "markdown"], help="table format")
  p.add_argument(
    "--radius-column",
    default=None,
    help="read radii from this extra column, one the run's method declares a radius "
    "(e.g. 'alm' of --method ucan: not a ball guarantee); the table heads it 'not the "
    "certified radius'",
  )
  p.add_argument(
    "--unverified",
    action="store_true",
    help="also read the columns rsjax verify does not vouch for (time, and any column the "
    "run's method does not define), labelled as unverified",
  )
  p.add_argument("--plot", default=None, help="write the certified-accuracy curves here (PNG)")
  p.add_argument(
    "--pa-cdf",
    default=None,
    metavar="PNG",
    help="plot the empirical CDF of p_A per file (Sun et al. Fig. 3; needs files "
    "certified with --save-counts)",
  )
  p.add_argument(
    "--easy-hard",
    default=None,
    metavar="REFERENCE",
    help="certified accuracy on easy / hard inputs, split by p_A >= 0.5 in this "
    "reference result file (e.g. the Gaussian model's, with --save-counts)",
  )


def _verified_extra(run) -> frozenset[str]:
  """The extra columns ``rsjax verify`` vouches for in a run (none without a run record)."""
  from rsjax import methods
  from rsjax.verify._columns import verified_columns

  if run is None:
    return frozenset()
  try:
    own = methods.get(run.method).columns
  except (KeyError, ValueError):
    own = ()
  return verified_columns(own)


def _extra_summary(label: str, res, verified: frozenset[str], unverified: bool) -> str:
  """One line on a result file's extra columns (method outputs such as sigma or alm): the
  verified ones, and with ``unverified`` the others, labelled."""
  parts = []
  for name, values in res.extra.items():
    if name not in verified:
      if not unverified:
        continue
      name = f"{name} (unverified)"
    numeric = values.dtype != object and len(values) > 0
    if name == "sound" and numeric:
      bad = int(np.sum(values == 0))
      parts.append(
        f"sound=1 on all {len(values)} rows"
        if bad == 0
        else f"sound=0 (NOT a certificate) on {bad} of {len(values)} rows"
      )
    elif numeric:
      parts.append(
        f"{name}: mean {np.mean(values):.4g} [{np.min(values):.4g}, {np.max(values):.4g}]"
      )
    else:
      parts.append(f"{name}: {len(set(values))} distinct values")
  return f"{label} extra columns: " + "; ".join(parts)


def run(args: argparse.Namespace) -> int:
  """Runs ``rsjax analyze``; returns the exit status."""
  from rsjax import metrics
  from rsjax.metrics import plots
  from rsjax.records import io

  results = {}
  labels = args.labels or [os.path.basename(p) for p in args.files]
  if len(labels) != len(args.files):
    raise CliError(f"--labels gives {len(labels)} names for {len(args.files)} files")
  twice = sorted({label for label in labels if labels.count(label) > 1})
  if twice:  # one label's row would show another file's numbers
    raise CliError(f"two files are labelled {twice[0]!r}: give each its own with --labels")
  runs, verified = [], {}
  for label, path in zip(labels, args.files, strict=True):
    if not os.path.exists(path):
      raise CliError(f"result file {path!r} does not exist")
    results[label] = io.read_certify(path)
    runs.append(_read_run(path))
    verified[label] = _verified_extra(runs[-1])
    if not len(results[label]):
      raise CliError(f"{path!r} has a header but no rows (nothing certified yet)")
  if args.radius_column:
    results = _other_radii(results, runs, args.files, args.radius_column)
    verified = dict(zip(results, verified.values(), strict=True))
  for label, run, path in zip(results, runs, args.files, strict=True):
    print(_run_summary(label, run, results[label]) if run is not None else _no_record(label))
    if run is not None and (rejected := _verify_words(path)):
      print(f"{label}: {rejected}")
  envelope = len(results) > 1
  if envelope:
    _warn_if_inputs_differ(results)
  radii = np.asarray(args.radii, dtype=np.float64)
  print(metrics.format_table(results, radii, fmt=args.format, show_envelope=envelope))
  for label, res in results.items():
    if any(c in verified[label] or args.unverified for c in res.extra):
      print(_extra_summary(label, res, verified[label], args.unverified))
  if args.plot:
    title = plot_title(runs, results)
    out = plots.plot_certified_accuracy(args.plot, results, show_envelope=envelope, title=title)
    print(f"plot written to {out}")
  try:
    if args.pa_cdf:
      pa = {label: metrics.label_probability(res) for label, res in results.items()}
      print(f"p_A CDF written to {plots.plot_pa_cdf(args.pa_cdf, pa)}")
    if args.easy_hard:
      _print_easy_hard(results, runs, args.easy_hard, radii)
  except ValueError as e:
    raise CliError(str(e)) from None
  return 0


def _radius_columns(run) -> dict[str, str]:
  """``{column: what it is}``: the radius columns the run's method declares (none without a
  run record)."""
  from rsjax import methods

  try:
    return dict(methods.get(run.method).radius_columns) if run is not None else {}
  except (KeyError, ValueError):
    return {}


def _other_radii(results: dict, runs: list, files: list, column: str) -> dict:
  """The results with radii from ``column``, a radius column each run's method declares
  (``Method.radius_columns``), each relabelled "not the certified radius"; refuses any other
  column (a sigma, an index, a column the method does not define)."""
  from rsjax.verify._columns import non_numeric

  out = {}
  for (label, res), run, path in zip(results.items(), runs, files, strict=True):
    declared = _radius_columns(run)
    if column not in declared:
      method = f"method {run.method!r}" if run is not None else "a run without a run record"
      raise CliError(
        f"{path}: column {column!r} is not a radius column of {method} (its radius "
        f"columns: {', '.join(sorted(declared)) or 'none'}; the certified radius is 'radius')"
      )
    if column not in res.extra:
      raise CliError(f"{path} has no column {column!r} (has {sorted(res.extra)})")
    if (why := non_numeric(res, (column,))) is not None:
      raise CliError(f"{path!r} {why}")
    print(f"{label}: radii from column {column!r}, {declared[column]}: not the certified radius")
    rad = np.where(res.predict >= 0, np.asarray(res.extra[column], np.float64), 0.0)
    out[f"{label} [{column}: not the certified radius]"] = dataclasses.replace(res, radius=rad)
  return out


def _no_record(label: str) -> str:
  """The run line of a file without a run record."""
  return f"no run record: rsjax verify cannot check {label} (NOT verified)"


def _verify_words(path: str) -> str:
  """'' when ``rsjax verify`` accepts the run in ``path``, else a line saying it rejects it."""
  from rsjax import verify

  try:
    report = verify.verify(path)
  except (verify.VerifyError, ValueError) as e:
    return f"rsjax verify REJECTS it: {e}"
  if not report.ok:
    return f"rsjax verify REJECTS it: {report.summary()}"
  return ""


def _warn_if_inputs_differ(results: dict) -> None:
  """Warns (stderr) when the files of an envelope certify different inputs."""
  sets = {label: set(res.idx.tolist()) for label, res in results.items()}
  common = set.intersection(*sets.values())
  if any(len(v) != len(common) for v in sets.values()):
    sizes = ", ".join(f"{label}: {len(v)}" for label, v in sets.items())
    print(
      f"rsjax analyze: warning: the envelope mixes files over different inputs ({sizes}; "
      f"{len(common)} in common); compare runs over the same inputs",
      file=sys.stderr,
    )


def _read_run(path):
  """The run of a result file (``rsjax.records.spec.RunSpec``), or None (no record or an old one;
  a record that cannot be read is named in a one-line warning)."""
  import warnings

  from rsjax.records.spec import RunFormatError, RunSpec, run_path

  try:
    return RunSpec.read(path)
  except RunFormatError as e:
    if os.path.exists(run_path(path)):
      warnings.warn(f"{e}; no run summary for {path}", stacklevel=2)
    return None


def _budget_words(run) -> str:
  """`` (budgeted: grid ..., first look ..., ...)`` of a budgeted run's record ('' if none);
  a schedule that is not what certify writes is said so (``rsjax verify`` refuses it)."""
  budget = (run.details or {}).get("budget") if isinstance(run.details, dict) else None
  if not budget:
    return ""
  try:
    rule = (
      f"rule {budget['rule']}" if "rule" in budget else f"final share {budget['final_share']:g}"
    )
    return (
      f" (budgeted: grid {run.options.get('grid')}, first look {budget['first']}, "
      f"ratio {budget['ratio']:g}, {rule})"
    )
  except (KeyError, TypeError, ValueError):
    return " (budgeted: its schedule is not one certify writes; rsjax verify refuses it)"


def _run_summary(label: str, run, res) -> str:
  """One line on what a run certified, from its record (the one ``verify`` checks)."""
  from rsjax.verify._run import alpha_words

  declared = len(run.indices())
  how = (" (multiclass radius)" if run.multiclass else "") + _budget_words(run)
  drawn = f"sigma={run.sigma:g}, {run.noise_label}, N={run.sampling.n}, alpha={alpha_words(run)}"
  words = _claim_words(run.method)
  if words is not None:
    drawn = words(run.options, run.sampling)
  return (
    f"{label}: {run.method}{how}, {drawn}, seed {run.seed}, {run.data.name} "
    f"{run.data.split} {_rows_words(run)}: {len(res)} of {declared} declared rows"
    + ("" if len(res) == declared else " (incomplete)")
  )


def _claim_words(name: str):
  """The ``claim_words`` of the registered method ``name`` (None: none, or no such method)."""
  from rsjax import methods

  try:
    return methods.get(name).claim_words
  except KeyError:
    return None


def _rows_words(run) -> str:
  """The rows of its split a run covers: ``rows 0:100 of 1797 (PART of the split)``."""
  d = run.data
  stop = d.size if d.stop < 0 else min(d.stop, d.size)
  rows = f"rows {d.start}:{stop}" + (f":{d.skip}" if d.skip != 1 else "") + f" of {d.size}"
  whole = d.start == 0 and stop == d.size and d.skip == 1
  return rows + ("" if whole else " (PART of the split)")


def plot_title(runs: list, results: dict) -> str:
  """sigma, noise (norm), N, alpha and number of inputs, from the files' runs
  (``rsjax.records.spec.RunSpec``, None where a file has none)."""
  from rsjax.verify._run import alpha_words

  runs = [r for r in runs if r is not None]

  def values(get):
    vals = [get(r) for r in runs]
    return ", ".join(dict.fromkeys(f"{v:g}" if isinstance(v, float) else str(v) for v in vals))

  parts = []
  if runs:
    parts.append(f"sigma={values(lambda r: r.sigma)}")
    parts.append(values(lambda r: r.noise_label))
    parts.append(f"N={values(lambda r: r.sampling.n)}")
    parts.append(f"alpha={values(alpha_words)}")
  counts = ", ".join(dict.fromkeys(str(len(r)) for r in results.values()))
  parts.append(f"{counts} inputs")
  return "certified accuracy: " + "; ".join(parts)


def _same_inputs(reference_path: str, reference, runs, results) -> None:
  """Refuses a reference run of other inputs than the files': its record names another
  dataset, split, size or array file, or a shared row's input fingerprint differs (the
  easy / hard split matches rows by ``idx``)."""
  from rsjax.runs import record

  if reference is None:
    raise CliError(f"--easy-hard {reference_path}: no run record, so its inputs are unknown")
  refs = record.read_records(reference_path)
  for (label, res), run in zip(results.items(), runs, strict=True):
    if run is None:
      raise CliError(f"--easy-hard: {label} has no run record, so its inputs are unknown")
    a, b = reference.data, run.data
    if a.differences(b):
      raise CliError(
        f"--easy-hard {reference_path} certified {a.name} {a.split} ({a.size} inputs), "
        f"{label} {b.name} {b.split} ({b.size}): not the same inputs"
      )
    recs = record.read_records(run.out)
    for i in set(res.idx.tolist()) & set(refs):
      if i in recs and recs[i].get("input") != refs[i].get("input"):
        raise CliError(f"--easy-hard: input {i} of {label} is not the reference's input {i}")


def _print_easy_hard(results, runs, reference_path: str, radii) -> None:
  """Certified accuracy on easy / hard inputs (p_A >= / < 0.5 under the reference file's
  model), the reference a run of the same inputs (:func:`_same_inputs`)."""
  from rsjax import metrics
  from rsjax.records import io

  if not os.path.exists(reference_path):
    raise CliError(f"reference file {reference_path!r} does not exist")
  _same_inputs(reference_path, _read_run(reference_path), runs, results)
  ref = io.read_certify(reference_path)
  ref_pa = (ref.idx, metrics.label_probability(ref))
  print(f"\ncertified accuracy on easy / hard inputs (p_A >= / < 0.5 under {reference_path})")
  head = ["", "subset", "n", *[f"r={r:g}" for r in radii]]
  rows = []
  for label, res in results.items():
    split = metrics.easy_hard_accuracy(res, ref_pa, radii)
    for sub in ("easy", "hard"):
      rows.append([label, sub, str(split[f"num_{sub}"]), *[f"{v:.3f}" for v in split[sub]]])
  widths = [max(len(r[j]) for r in [head, *rows]) for j in range(len(head))]
  for r in [head, *rows]:
    cells = enumerate(zip(r, widths, strict=True))
    print("  ".join(c.ljust(w) if j < 2 else c.rjust(w) for j, (c, w) in cells))
