"""The code passes its linter, its formatter and its type checker.

The settings are in pyproject.toml: ``[tool.ruff]`` (lint rules, line length,
format) over rsjax/, tests/, benchmarks/, experiments/ and the site's Python (docs/*.py), and ``[tool.mypy]``
(the typed core: the engine, ``rsjax.stats`` and verify's own modules, listed
as its ``files``). Each tool runs as ``python -m ...`` of the interpreter that
runs the tests (both are in the ``dev`` extra); a test is skipped when its tool
is not installed, and on failure prints what the tool found.
"""

import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCES = (
  "rsjax",
  "tests",
  "benchmarks",
  "experiments",
  "docs/hooks.py",
  "docs/plots.py",
  "docs/build.py",
)


def _run(*args: str) -> subprocess.CompletedProcess:
  """``python -m args...`` in the repository root, its output captured."""
  return subprocess.run(
    [sys.executable, "-m", *args],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=1800,
    check=False,
  )


def _require(module: str) -> None:
  if importlib.util.find_spec(module) is None:
    pytest.skip(f"{module} is not installed (pip install -e '.[dev]')")


def _report(proc: subprocess.CompletedProcess, limit: int = 20_000) -> str:
  text = (proc.stdout + proc.stderr).strip()
  return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more chars)"


def _check(proc: subprocess.CompletedProcess, what: str) -> None:
  if proc.returncode != 0:
    pytest.fail(f"{what} (exit {proc.returncode}):\n{_report(proc)}", pytrace=False)


def test_ruff_check():
  _require("ruff")
  proc = _run("ruff", "check", "--no-cache", "--output-format", "concise", *SOURCES)
  _check(proc, "ruff check found lint")


def test_ruff_format():
  """``ruff format --check``: one line per file it would reformat (``ruff format --diff`` shows how)."""
  _require("ruff")
  proc = _run("ruff", "format", "--no-cache", "--check", "--output-format", "concise", *SOURCES)
  _check(proc, "ruff format would reformat")


def test_mypy():
  _require("mypy")
  # The files and settings are pyproject.toml's; no cache, so a run reads the tree as it is.
  proc = _run("mypy", "--no-incremental", "--cache-dir", "/dev/null")
  _check(proc, "mypy found type errors")


#: Commit subjects are at most this long from this commit on (older ones are not rewritten).
SUBJECT_MAX = 72
SUBJECTS_FROM = "611cbc2"


def test_commit_subjects_are_short():
  """``git log --oneline`` reads: every subject since :data:`SUBJECTS_FROM` fits 72
  characters (the why and the figures go in the body)."""
  git = lambda *a: subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True)  # noqa: E731
  if git("rev-parse", "--verify", "-q", f"{SUBJECTS_FROM}^{{commit}}").returncode != 0:
    pytest.skip("not a git checkout with the project's history (a copy or a shallow clone)")
  log = git("log", "--format=%h %s", f"{SUBJECTS_FROM}^..HEAD").stdout.splitlines()
  assert log, "git log printed nothing"
  long = [line for line in log if len(line.split(" ", 1)[1]) > SUBJECT_MAX]
  assert not long, "subjects over 72 characters:\n" + "\n".join(long)
