"""Edits of a certify run that the verify tests make: a copy of the run, an edited
column or row record, a moved count."""

import json
import shutil

from rsjax import record


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
