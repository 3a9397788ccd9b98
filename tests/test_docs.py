"""The site's reference is complete and its commands are current (issue 58).

No MkDocs needed: the names come from ``docs/hooks.py``, the function that writes the API
pages when the site is built, so what is checked here is what the site shows.

* Every public name of ``rsjax`` (``rsjax.__all__``) and of each of its lazy modules (their
  ``__all__``) has its own docstring (a constant: the ``#:`` comment above its assignment),
  and each of those modules has its API page in the site's navigation.
* Every ``rsjax`` command line in a bash block of the README or of a page parses with the
  command's own parser (the blocks the build does not execute are checked this way).
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _hooks():
  spec = importlib.util.spec_from_file_location("rsjax_docs_hooks", DOCS / "hooks.py")
  assert spec and spec.loader
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


#: Public packages the face does not hand on, each with its API page.
_IMPORTED_BY_NAME = ("ablation", "app.bench", "app.launch", "dual", "training")


def _modules() -> list[str]:
  import rsjax

  # The face's lazy modules and the packages imported by name (``import rsjax.dual``).
  return ["rsjax", *rsjax._LAZY_MODULES, *_IMPORTED_BY_NAME]


@pytest.mark.parametrize("module", _modules())
def test_every_public_name_has_a_docstring(module):
  hooks = _hooks()
  missing = []
  for public, path, obj in hooks.public_names(module):
    if hooks.documented_by_docstring(obj):
      doc = inspect.getdoc(obj) or ""
      if inspect.isclass(obj) and (
        "__doc__" not in vars(obj) or doc.startswith(f"{obj.__name__}(")  # a dataclass's default
      ):
        doc = ""
    else:
      doc = hooks.constant_doc(path) if path else ""
    if not doc.strip():
      missing.append(f"{public} ({path or 'no definition found'})")
  assert not missing, "public names without a docstring:\n" + "\n".join(missing)


def test_every_module_has_an_api_page_in_the_navigation():
  nav = (ROOT / "mkdocs.yml").read_text()
  for module in _modules():
    page = f"reference/api/{module}.md"
    assert f"<!-- rsjax-api: {module} -->" in (DOCS / page).read_text(), page
    assert page in nav, page


def test_every_subcommand_has_a_cli_entry():
  from rsjax.app.cli._parser import COMMANDS

  assert "<!-- rsjax-cli -->" in (DOCS / "reference/cli.md").read_text()
  text = _hooks().cli_markdown()
  for command in COMMANDS:
    name = command.replace("_", "-")
    assert f"## `rsjax {name}`" in text, name
    assert f"usage: rsjax {name}" in text, name


def _command_lines() -> list[tuple[str, str]]:
  """``(where, line)`` of every ``rsjax ...`` line of a bash block (continuations joined)."""
  out = []
  for md in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
    for block in re.findall(r"```bash[^\n]*\n(.*?)```", md.read_text(), re.S):
      for line in re.sub(r"\\\n\s*", " ", block).splitlines():
        line = line.strip()
        if line.startswith(("rsjax ", "python -m rsjax ")):
          out.append((str(md.relative_to(ROOT)), line))
  return out


def _argv(line: str) -> list[str]:
  """The arguments of a command line: shell variables as ``1``, comments and redirections cut."""
  line = re.sub(r"\$\(.*?\)|\$\w+", "1", line)
  words = shlex.split(line, comments=True)
  words = words[3:] if words[0] == "python" else words[1:]
  for i, w in enumerate(words):
    if w in ("&", "|", "&&", ";") or w.startswith((">", "2>")):
      return words[:i]
  return words


def test_the_pages_have_command_lines():
  assert len(_command_lines()) > 40


@pytest.mark.parametrize("where, line", _command_lines(), ids=lambda v: v[:60])
def test_a_command_line_of_a_page_parses(where, line):
  from rsjax.app.cli import build_parser

  argv = _argv(line)
  try:
    args = build_parser().parse_args(argv)
  except SystemExit as e:
    pytest.fail(f"{where}: `{line}` does not parse (exit {e.code})")
  assert args.command == argv[[a.startswith("-") for a in argv].index(False)]


def test_a_renamed_flag_fails_to_parse():
  from rsjax.app.cli import build_parser

  with pytest.raises(SystemExit):
    build_parser().parse_args(_argv("rsjax certify m out.tsv --N-samples 10"))
