"""Edits of a certify run that the verify tests make: a copy of the run, an edited
column or row record, a moved count."""

import json
import shutil

from rsjax.runs import record


def copy_run(src, dst):
  """Copies a result file with its run record and certificate record; returns ``dst``."""
  for suffix in ("", ".run.json", ".cert.jsonl"):
    shutil.copy(str(src) + suffix, str(dst) + suffix)
  return dst


def move_one_count(r):
  """Moves one estimation sample from the top class to another (the sum stays N)."""
  top = max(r["counts"], key=lambda k: r["counts"][k])
  other = next(str(k) for k in range(10) if str(k) != top)
  r["counts"][top] -= 1
  r["counts"][other] = r["counts"].get(other, 0) + 1
  return r


def edit_column(path, j, column, fn):
  """Applies ``fn`` to the text of ``column`` in data row ``j`` of a result file."""
  lines = path.read_text().split("\n")
  col = lines[0].split("\t").index(column)
  fields = lines[1 + j].split("\t")
  fields[col] = fn(fields[col])
  lines[1 + j] = "\t".join(fields)
  path.write_text("\n".join(lines))


def edit_record(path, idx, fn):
  """Applies ``fn`` to the record of row ``idx`` (a dict) in ``<path>.cert.jsonl``."""
  rec = path.parent / (path.name + record.RECORD_SUFFIX)
  out = []
  for line in rec.read_text().splitlines():
    r = json.loads(line)
    out.append(json.dumps(fn(r) if r["idx"] == idx else r, sort_keys=True))
  rec.write_text("\n".join(out) + "\n")


def edit_run(path, fn, *, restate_claim=True):
  """Applies ``fn`` to the run record (a dict) of a result file and writes it back; as a
  forger would, the record's stated claim digest (``key.claim``) is then computed again
  from the edited fields (``restate_claim=False`` leaves it as it was)."""
  from rsjax.records.spec import RunFormatError, RunSpec

  rec = path.parent / (path.name + ".run.json")
  run = json.loads(rec.read_text())
  run = fn(run) or run
  if restate_claim and isinstance(run.get("key"), dict) and "claim" in run["key"]:
    try:
      run["key"]["claim"] = RunSpec.from_json(run).claim_digest()
    except (RunFormatError, TypeError, ValueError):
      pass  # a record this rsjax cannot read: left for verify to refuse
  rec.write_text(json.dumps(run, indent=1, sort_keys=True))


def move_to_look(r, n):
  """Moves a row's record to ``n`` estimation samples: its counts scaled to sum to ``n``
  (largest remainders), as a forger claiming that the row stopped there would write them."""
  old = sum(r["counts"].values())
  exact = {c: v * n / old for c, v in r["counts"].items()}
  counts = {c: int(v) for c, v in exact.items()}
  for c in sorted(exact, key=lambda c: counts[c] - exact[c])[: n - sum(counts.values())]:
    counts[c] += 1
  r["counts"], r["n"] = {c: v for c, v in counts.items() if v}, n
  return r


def reradius(path):
  """The forger's last step: rewrites ``predict``, ``radius``, ``correct`` (and a budgeted
  run's ``samples``) of every row and the recorded ``p_lower`` from the counts under the
  run record as it now stands (Cohen's binary or multiclass radius, a budgeted run's rule),
  so that verify's recomputation agrees with the file."""
  import numpy as np

  from rsjax.claims import (
    ANYTIME_RULE,
    anytime_certificate,
    anytime_levels,
    budget_levels,
    cohen_certificate,
    read_rows,
  )
  from rsjax.records import io
  from rsjax.records.spec import RunSpec
  from rsjax.verify._run import certificate_view

  run = RunSpec.read(path)
  cert = certificate_view(run)
  res = io.read_certify(path)
  recs = record.read_records(path)
  budget, n, alpha = cert.get("budget"), run.sampling.n, run.sampling.alpha
  anytime = bool(budget) and budget.get("rule") == ANYTIME_RULE
  levels = None
  if budget:
    levels = (anytime_levels if anytime else budget_levels)(cert, n, alpha, [])
  rows = read_rows(cert, res, recs, [], levels)
  certificate = anytime_certificate if anytime else cohen_certificate
  pred, rad, p = certificate(cert, rows, run.sigma)
  lines = path.read_text().split("\n")
  head = lines[0].split("\t")
  for j in range(len(res)):
    fields = lines[1 + j].split("\t")
    fields[head.index("predict")] = str(int(pred[j]))
    fields[head.index("radius")] = repr(float(rad[j]))
    fields[head.index("correct")] = str(int(pred[j] == res.label[j]))
    if "samples" in head:
      fields[head.index("samples")] = str(int(rows.n[j]))
    lines[1 + j] = "\t".join(fields)
  path.write_text("\n".join(lines))
  by_idx = {int(i): float(p[j]) for j, i in enumerate(res.idx)}
  edit_record_all(path, lambda r: {**r, "p_lower": by_idx.get(r["idx"], r.get("p_lower"))})
  assert np.all(rows.valid)


def edit_record_all(path, fn):
  """Applies ``fn`` to every row record of ``<path>.cert.jsonl``."""
  rec = path.parent / (path.name + record.RECORD_SUFFIX)
  out = [json.dumps(fn(json.loads(line)), sort_keys=True) for line in rec.read_text().splitlines()]
  rec.write_text("\n".join(out) + "\n")


def drop_rows(path, keep):
  """Keeps only the rows (and their records) whose idx satisfies ``keep(idx)``."""
  lines = path.read_text().split("\n")
  body = [ln for ln in lines[1:] if ln and keep(int(ln.split("\t")[0]))]
  path.write_text("\n".join([lines[0], *body]) + "\n")
  rec = path.parent / (path.name + record.RECORD_SUFFIX)
  kept = [ln for ln in rec.read_text().splitlines() if keep(json.loads(ln)["idx"])]
  rec.write_text("".join(ln + "\n" for ln in kept))
