"""MkDocs hooks of the site: the environment of the executed blocks, and the generated pages.

* ``on_config``: the executed blocks (markdown-exec) run in ``build/docs-work`` of the checkout
  with this Python's ``rsjax`` and ``python`` first on the PATH, on the CPU, with JAX's
  compilation cache kept under ``build/`` (a rebuild compiles nothing again).
* ``on_page_markdown``: ``<!-- rsjax-api: MODULE -->`` becomes the reference of every public
  name of ``rsjax`` (``MODULE`` = ``rsjax``: ``rsjax.__all__``) or of one of its lazy modules
  (``rsjax.MODULE.__all__``), each rendered by mkdocstrings from the module that defines it;
  ``<!-- rsjax-cli -->`` becomes the help of ``rsjax`` and of each subcommand, from the parsers
  (``rsjax.app.cli.build_parser``). The names come from the code, so a new name or command has a
  page the next build.

``public_names`` and ``constant_doc`` are also what ``tests/test_docs.py`` checks: every public
name has its own docstring (a constant: the ``#:`` comment above its assignment).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "build" / "docs-work"
_API = re.compile(r"<!-- rsjax-api: ([\w.]+) -->")
_CLI = "<!-- rsjax-cli -->"
_STARTED: dict[str, float] = {}


def on_config(config: Any) -> Any:
  """Sets the environment of the executed blocks (they run during the build)."""
  os.chdir(ROOT)  # the blocks' workdir="build/docs-work" is relative to the checkout
  WORK.mkdir(parents=True, exist_ok=True)
  bin_dir = os.path.dirname(sys.executable)
  os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  os.environ.setdefault("RSJAX_COMPILATION_CACHE", str(WORK / "jax-cache"))
  os.environ.setdefault("MPLBACKEND", "Agg")
  os.environ["COLUMNS"] = "100"  # argparse's help width, in the CLI page and in blocks
  docs = str(ROOT / "docs")
  if docs not in sys.path:
    sys.path.insert(0, docs)  # executed Python blocks import docs/plots.py
  return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
  """Expands the reference markers of a page (and starts its clock)."""
  _STARTED[page.file.src_uri] = time.perf_counter()
  markdown = _API.sub(lambda m: api_markdown(m.group(1)), markdown)
  if _CLI in markdown:
    markdown = markdown.replace(_CLI, cli_markdown())
  return markdown


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
  """Logs how long the page took to render, its executed blocks included."""
  seconds = time.perf_counter() - _STARTED.pop(page.file.src_uri, time.perf_counter())
  if seconds >= 1:
    logging.getLogger("mkdocs.hooks").info(f"docs: {page.file.src_uri} in {seconds:.0f} s")
  return html


def public_names(module: str) -> Iterator[tuple[str, str, Any]]:
  """``(public name, dotted path of its definition or "", object)`` of every name that
  ``rsjax`` (``module="rsjax"``) or ``rsjax.<module>`` hands on, in ``__all__`` order."""
  import rsjax

  package = rsjax if module == "rsjax" else importlib.import_module(f"rsjax.{module}")
  prefix = "rsjax" if module == "rsjax" else f"rsjax.{module}"
  for name in package.__all__:
    obj = getattr(package, name)
    yield f"{prefix}.{name}", definition(prefix, name, obj), obj


def definition(package: str, name: str, obj: Any) -> str:
  """The dotted path where ``obj`` is defined: its module and qualified name for a module,
  class or function; else ``module.name`` of the submodule of ``package`` that assigns
  ``name`` ("" if none)."""
  if inspect.ismodule(obj):
    return obj.__name__
  module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
  if isinstance(module, str) and isinstance(qualname, str) and module.startswith("rsjax"):
    return f"{module}.{qualname}"
  if package == "rsjax":
    import rsjax

    return f"rsjax.{rsjax._LAZY_NAMES[name]}.{name}"
  for source in _sources(package):
    if re.search(rf"^{re.escape(name)}\s*[:=]", source.read_text(), re.M):
      return f"{_dotted(source)}.{name}"
  return ""


def documented_by_docstring(obj: Any) -> bool:
  """Whether ``obj`` is rendered from its own docstring (a module, class or function, also
  behind a decorator) rather than from the ``#:`` comment of an assignment."""
  return (
    inspect.ismodule(obj)
    or inspect.isclass(obj)
    or inspect.isroutine(obj)
    or (callable(obj) and hasattr(obj, "__wrapped__"))
  )


def constant_doc(path: str) -> str:
  """The comment lines (``#:`` or ``#``) right above the assignment of ``path`` (module.NAME)."""
  module, name = path.rsplit(".", 1)
  file = _file(module)
  lines = file.read_text().splitlines()
  for i, line in enumerate(lines):
    if re.match(rf"{re.escape(name)}\s*[:=]", line):
      doc: list[str] = []
      j = i - 1
      while j >= 0 and lines[j].startswith("#"):
        doc.insert(0, lines[j].lstrip("#:").strip())
        j -= 1
      return " ".join(doc)
  return ""


def _file(module: str) -> Path:
  base = ROOT / module.replace(".", "/")
  return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _dotted(file: Path) -> str:
  parts = file.relative_to(ROOT).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources(package: str) -> list[Path]:
  """The package's own files, the ``__init__`` last (it re-exports; others define)."""
  base = ROOT / package.replace(".", "/")
  files = sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]
  return sorted(files, key=lambda p: p.name == "__init__.py")


def api_markdown(module: str) -> str:
  """The reference of ``rsjax`` or ``rsjax.<module>``: its docstring, then each public name."""
  out = []
  if module != "rsjax":
    out.append(
      f"::: rsjax.{module}\n    options:\n      members: false\n      show_root_heading: false\n"
    )
  for public, path, obj in public_names(module):
    if path and documented_by_docstring(obj):
      options = [
        f'heading: "{public}"',
        f'toc_label: "{public.rsplit(".", 1)[1]}"',
        "heading_level: 2",
      ]
      if inspect.ismodule(obj):
        options.append("members: false")
      out.append(f"::: {path}\n    options:\n" + "".join(f"      {o}\n" for o in options))
    else:  # a constant or a functools.partial: its #: comment, where it is defined
      doc = constant_doc(path) if path else ""
      where = f"Defined in `{path.rsplit('.', 1)[0]}`. " if path else ""
      kind = f"Type: `{type(obj).__name__}`."
      out.append(f"## `{public}` {{ #{public} }}\n\n{doc}\n\n{where}{kind}\n")
  return "\n".join(out)


def cli_markdown() -> str:
  """``rsjax --help`` and the help of every subcommand, each under its own heading."""
  import argparse

  from rsjax.app.cli import build_parser

  parser = build_parser()
  out = [f"## `rsjax`\n\n```text\n{parser.format_help()}```\n"]
  for action in parser._actions:
    if isinstance(action, argparse._SubParsersAction):
      for name, sub in action.choices.items():
        out.append(f"## `rsjax {name}`\n\n```text\n{sub.format_help()}```\n")
  return "\n".join(out)
