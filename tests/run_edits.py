"""Edits of a certify run that the verify tests make: a copy of the run, a moved count."""

import shutil


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
