"""The layering written in docs/ARCHITECTURE.md holds in the code.

The table is the fenced ``layers`` block of docs/ARCHITECTURE.md: one line a
layer, the bottom first, ``layer N name: entry, entry, ...``. An entry names a
module or a package; a package entry covers the submodules that no more
specific entry names. Over rsjax/ and benchmarks/, read with ``ast``:

* every module has a layer, and every entry names a module or package;
* no module imports one of a higher layer; imports inside functions count, and
  ``from P import name`` is an import of the module ``P.name`` when there is
  one, else of ``P`` (a package's ``__init__``);
* no import circle;
* no two folders of rsjax/ import each other (a folder is a package's directory: a nested
  one counts as its own folder, and again as part of the folder directly under rsjax/;
  the root's own modules are placed one by one by the checks above);
* no module of rsjax/, benchmarks/ or experiments/ is over 450 lines.

Small packages built in a temporary directory check that each check sees what it
should (an upward lazy import, a circle, two folders that import each other).
"""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ARCHITECTURE.md"
LAYERED = ("rsjax", "benchmarks")
SIZED = ("rsjax", "benchmarks", "experiments")
MAX_LINES = 450

# Imports that still go against the table, and modules still over MAX_LINES, each while a
# change that removes it is in progress (a test fails once an entry no longer applies).
KNOWN_UPWARD: set[tuple[str, str]] = set()
KNOWN_LONG: set[str] = set()

MAX_FUNCTION_LINES = 80
# Functions over MAX_FUNCTION_LINES code lines, each with why it stays one function (a test
# fails once an entry is no longer over the cap, or no longer exists).
LONG_FUNCTIONS = {
  # Split in progress (one branch each), listed until they land:
}

_LAYER_LINE = re.compile(r"^layer\s+(\d+)\s+([\w -]+):\s*(.*)$")


def parse_layers(markdown: str) -> dict[str, tuple[int, str]]:
  """``{entry: (layer number, layer name)}`` of the fenced ``layers`` block of ``markdown``."""
  blocks = re.findall(r"^```layers\n(.*?)^```", markdown, re.S | re.M)
  if len(blocks) != 1:
    raise ValueError(f"expected one ```layers block, found {len(blocks)}")
  table, numbers, pending = {}, [], None
  for line in blocks[0].splitlines() + [""]:
    if pending is not None and line.startswith(" "):  # a continued line of entries
      pending[2] += " " + line.strip()
      continue
    if pending is not None:
      number, name, entries = pending
      for entry in filter(None, (e.strip() for e in entries.split(","))):
        if entry in table:
          raise ValueError(f"{entry} is in layer {table[entry][0]} and in layer {number}")
        table[entry] = (number, name)
      pending = None
    if line.strip():
      m = _LAYER_LINE.match(line)
      if m is None:
        raise ValueError(f"not a layer line: {line!r}")
      numbers.append(int(m[1]))
      pending = [int(m[1]), m[2].strip(), m[3]]
  if numbers != list(range(1, len(numbers) + 1)):
    raise ValueError(f"layers must be numbered 1, 2, ... from the bottom, got {numbers}")
  return table


def module_names(root: pathlib.Path, packages) -> dict[str, pathlib.Path]:
  """``{dotted name: path}`` of every module of ``packages`` (a package is its ``__init__``)."""
  out = {}
  for package in packages:
    for path in sorted((root / package).rglob("*.py")):
      parts = path.relative_to(root).with_suffix("").parts
      if parts[-1] == "__init__":
        parts = parts[:-1]
      out[".".join(parts)] = path
  return out


def layer_of(module: str, table: dict):
  """The layer of ``module``: its own entry, else that of its nearest package; None if none."""
  parts = module.split(".")
  for k in range(len(parts), 0, -1):
    entry = ".".join(parts[:k])
    if entry in table:
      return table[entry][0]
  return None


def imports_of(path: pathlib.Path, module: str, modules) -> set[str]:
  """The modules of ``modules`` that ``module`` (at ``path``) imports, anywhere in its code."""
  is_package = path.name == "__init__.py"
  found = set()

  def add(name):
    while name and name not in modules:
      name = name.rpartition(".")[0]
    if name and name != module:
      found.add(name)

  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    for name in lazy_targets(node, module):
      add(name)
    if isinstance(node, ast.Import):
      for alias in node.names:
        add(alias.name)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        package = module.split(".")[: len(module.split(".")) - node.level + is_package]
        base = ".".join(package + ([base] if base else []))
      for alias in node.names:
        add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
  return found


#: Module-level tables of a package's lazy names (``rsjax/__init__.py``): name -> submodule
#: (relative), and submodules handed on as attributes.
LAZY_TABLES = ("_LAZY_NAMES", "_LAZY_MODULES")


def _strings(node: ast.AST) -> list[str]:
  """The string constants of a dict's values, or of a tuple, list or set."""
  if isinstance(node, ast.Dict):
    return [
      v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)
    ]
  if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
    return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
  return []


def lazy_targets(node: ast.AST, module: str) -> list[str]:
  """The modules a lazy table at ``node`` imports on first use (PEP 562), as if imported:
  ``_lazy.exports(__name__, {name: "pkg.mod"}, submodules=("sub",))`` and the
  :data:`LAZY_TABLES` assignments (names relative to ``module``)."""
  if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "exports":
    table = _strings(node.args[1]) if len(node.args) > 1 else []
    subs = [_strings(k.value) for k in node.keywords if k.arg == "submodules"]
    subs += [_strings(node.args[2])] if len(node.args) > 2 else []
    return table + [f"{module}.{s}" for group in subs for s in group]
  if isinstance(node, ast.Assign) and any(
    isinstance(t, ast.Name) and t.id in LAZY_TABLES for t in node.targets
  ):
    return [f"{module}.{s}" for s in _strings(node.value)]
  return []


def import_graph(root: pathlib.Path, packages) -> dict[str, set[str]]:
  """``{module: modules it imports}`` over ``packages``."""
  modules = module_names(root, packages)
  return {name: imports_of(path, name, modules) for name, path in modules.items()}


def upward_imports(graph: dict, table: dict) -> list[tuple[str, str]]:
  """The imports ``(a, b)`` of ``graph`` where ``b`` is in a higher layer than ``a``."""
  return sorted(
    (a, b) for a, deps in graph.items() for b in deps if layer_of(b, table) > layer_of(a, table)
  )


def circles(graph: dict) -> list[list[str]]:
  """The import circles of ``graph``: its strongly connected parts of two or more modules."""
  index, low, on_stack, stack, found = {}, {}, set(), [], []

  def visit(v):  # Tarjan's algorithm
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph.get(v, ())):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      part = []
      while not part or part[-1] != v:
        part.append(stack.pop())
        on_stack.discard(part[-1])
      if len(part) > 1:
        found.append(sorted(part))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return sorted(found)


def without(graph: dict, edges) -> dict:
  return {a: {b for b in deps if (a, b) not in edges} for a, deps in graph.items()}


def test_the_table_names_every_module_and_only_modules():
  table = parse_layers(DOC.read_text())
  modules = module_names(ROOT, LAYERED)
  unplaced = [m for m in modules if layer_of(m, table) is None]
  assert not unplaced, f"modules without a layer in {DOC.name}: {unplaced}"
  stale = [e for e in table if e not in modules]
  assert not stale, f"entries of {DOC.name} that name no module or package: {stale}"


def test_no_module_imports_a_higher_layer():
  table = parse_layers(DOC.read_text())
  graph = import_graph(ROOT, LAYERED)
  up = [
    f"{a} (layer {layer_of(a, table)}) imports {b} (layer {layer_of(b, table)})"
    for a, b in upward_imports(without(graph, KNOWN_UPWARD), table)
  ]
  assert not up, "\n".join(up)


def _line_counts() -> dict[str, int]:
  return {
    p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines())
    for d in SIZED
    for p in sorted((ROOT / d).rglob("*.py"))
  }


def test_the_known_exceptions_are_still_needed():
  """An exception that no longer applies is removed from KNOWN_UPWARD or KNOWN_LONG."""
  graph = import_graph(ROOT, LAYERED)
  gone = [edge for edge in KNOWN_UPWARD if edge[1] not in graph.get(edge[0], ())]
  assert not gone, f"remove from KNOWN_UPWARD (no longer imported): {gone}"
  short = [path for path in KNOWN_LONG if _line_counts().get(path, 0) <= MAX_LINES]
  assert not short, f"remove from KNOWN_LONG (now {MAX_LINES} lines or fewer): {short}"


def test_no_import_circle():
  found = circles(without(import_graph(ROOT, LAYERED), KNOWN_UPWARD))
  assert not found, "\n".join(f"circle of {len(c)} modules: {', '.join(c)}" for c in found)


def folder_of(path: pathlib.Path, root: pathlib.Path, top: bool = False) -> str | None:
  """The dotted folder (package directory) that holds the module at ``path``; with ``top``,
  the folder directly under the root package. None for the root package's own modules."""
  parts = path.parent.relative_to(root).parts
  if len(parts) < 2:
    return None
  return ".".join(parts[:2] if top else parts)


def folder_pairs(root: pathlib.Path, package: str, top: bool = False) -> list[tuple]:
  """``(a, b, imports)`` for every two folders of ``package`` that import each other, with
  the module imports that tie them (any import: inside functions and lazy tables too)."""
  modules = module_names(root, (package,))
  folder = {name: folder_of(path, root, top) for name, path in modules.items()}
  ties: dict[tuple[str, str], list[str]] = {}
  for a, path in modules.items():
    for b in sorted(imports_of(path, a, modules)):
      fa, fb = folder[a], folder[b]
      if fa and fb and fa != fb:
        ties.setdefault((fa, fb), []).append(f"{a} -> {b}")
  return sorted((a, b, ties[a, b] + ties[b, a]) for a, b in ties if a < b and (b, a) in ties)


def test_no_two_folders_import_each_other():
  """Each folder is one band of layers: the folder tree draws the layering."""
  found = [
    f"{a} <-> {b}: {'; '.join(ties)}"
    for top in (False, True)
    for a, b, ties in folder_pairs(ROOT, "rsjax", top)
  ]
  assert not found, "\n".join(found)


def test_the_folder_check_sees_two_folders_that_import_each_other(tmp_path):
  files = {
    "__init__.py": "",
    "top.py": "from pkg.a import x\n",  # the root's own module: no folder
    "a/__init__.py": "",
    "a/x.py": "import pkg.top\n\ndef f():\n  from pkg.b import y\n  return y\n",
    "a/inner/__init__.py": "",
    "a/inner/z.py": "",
    "b/__init__.py": "",
    "b/y.py": "from pkg.a.inner import z\n",
    "c/__init__.py": "from pkg.c.sub import w\n",
    "c/v.py": "",
    "c/sub/__init__.py": "",
    "c/sub/w.py": "from pkg.c import v\n",
  }
  for name, text in files.items():
    (tmp_path / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "pkg" / name).write_text(text)
  # a/x -> b (inside a function) and b -> a/inner: a pair of top folders, not of folders;
  # c -> c/sub -> c: a pair of folders inside one top folder.
  assert folder_pairs(tmp_path, "pkg") == [
    ("pkg.c", "pkg.c.sub", ["pkg.c -> pkg.c.sub.w", "pkg.c.sub.w -> pkg.c.v"])
  ]
  assert folder_pairs(tmp_path, "pkg", top=True) == [
    ("pkg.a", "pkg.b", ["pkg.a.x -> pkg.b.y", "pkg.b.y -> pkg.a.inner.z"])
  ]


def test_no_module_over_450_lines():
  long = [
    f"{path}: {n} lines"
    for path, n in _line_counts().items()
    if n > MAX_LINES and path not in KNOWN_LONG
  ]
  assert not long, "\n".join(long)


def _code_lines(lines: list[str], node: ast.AST, doc: ast.AST | None) -> int:
  """Lines of ``node`` that are not blank, not only a comment and not its docstring."""
  skip = set(range(doc.lineno, doc.end_lineno + 1)) if doc is not None else set()
  return sum(
    1
    for i in range(node.lineno, node.end_lineno + 1)
    if i not in skip and lines[i - 1].strip() and not lines[i - 1].strip().startswith("#")
  )


def function_lengths(root: pathlib.Path, dirs=LAYERED) -> dict[str, int]:
  """``{"path::name": code lines}`` of every function (nested ones under their own name,
  and counted in their parent's lines too)."""
  out = {}
  for d in dirs:
    for p in sorted((root / d).rglob("*.py")):
      text = p.read_text()
      lines = text.splitlines()
      for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
          first = node.body[0]
          doc = (
            first
            if isinstance(first, ast.Expr)
            and isinstance(getattr(first, "value", None), ast.Constant)
            and isinstance(first.value.value, str)
            else None
          )
          name = f"{p.relative_to(root).as_posix()}::{node.name}"
          out[name] = max(out.get(name, 0), _code_lines(lines, node, doc))
  return out


def test_no_function_over_80_code_lines():
  lengths = function_lengths(ROOT, ("rsjax",))  # the library (benchmarks are scripts)
  long = {k: n for k, n in lengths.items() if n > MAX_FUNCTION_LINES}
  unlisted = [f"{k}: {n} code lines" for k, n in sorted(long.items()) if k not in LONG_FUNCTIONS]
  assert not unlisted, "\n".join(unlisted)
  stale = sorted(set(LONG_FUNCTIONS) - set(long))
  assert not stale, f"no longer over {MAX_FUNCTION_LINES} code lines (drop them): {stale}"


def test_the_function_cap_counts_code_lines_only(tmp_path):
  body = "\n".join(f"  x{i} = {i}" for i in range(81))
  src = f'def f():\n  """Doc.\n\n  more doc\n  """\n  # a comment\n\n{body}\n'
  (tmp_path / "pkg").mkdir()
  (tmp_path / "pkg" / "m.py").write_text(src + "\n\ndef g():\n  return 1\n")
  assert function_lengths(tmp_path, ("pkg",)) == {"pkg/m.py::f": 82, "pkg/m.py::g": 2}


def test_the_checks_see_a_lazy_upward_import_a_circle_and_a_module_without_layer(tmp_path):
  pkg = tmp_path / "pkg"
  (pkg / "sub").mkdir(parents=True)
  (pkg / "__init__.py").write_text("")
  (pkg / "low.py").write_text("import os\n\ndef f():\n  from pkg import high\n  return high\n")
  (pkg / "high.py").write_text("from pkg.low import f\nfrom . import low\n")
  (pkg / "sub" / "__init__.py").write_text("from pkg.sub import leaf\n")
  (pkg / "sub" / "leaf.py").write_text("from .. import low\nfrom pkg import sub\n")
  (pkg / "stray.py").write_text("")
  table = parse_layers(
    "text\n```layers\nlayer 1 base: pkg, pkg.low,\n  pkg.sub\nlayer 2 top: pkg.high\n```\n"
  )
  assert table == {
    "pkg": (1, "base"),
    "pkg.low": (1, "base"),
    "pkg.sub": (1, "base"),
    "pkg.high": (2, "top"),
  }
  graph = import_graph(tmp_path, ["pkg"])
  assert graph["pkg.low"] == {"pkg.high"}  # the import inside a function counts
  assert graph["pkg.high"] == {"pkg.low"}
  assert graph["pkg.sub.leaf"] == {"pkg.low", "pkg.sub"}  # relative, and a package's face
  assert layer_of("pkg.sub.leaf", table) == 1 and layer_of("other", table) is None
  assert upward_imports(graph, table) == [("pkg.low", "pkg.high")]
  assert circles(graph) == [["pkg.high", "pkg.low"], ["pkg.sub", "pkg.sub.leaf"]]
  assert circles(without(graph, {("pkg.low", "pkg.high"), ("pkg.sub", "pkg.sub.leaf")})) == []
  # 'stray' falls under the 'pkg' entry; without that entry it has no layer.
  assert layer_of("pkg.stray", {k: v for k, v in table.items() if k != "pkg"}) is None


#: The most modules and packages at the root of ``rsjax/`` (the root grouped by job). 23, one
#: more than 22: claims/, records/ and app/ came for bench/ and cli/ so that each folder is
#: one band of layers (test_no_two_folders_import_each_other). 24: ablation/, the methods
#: whose randomness is not additive noise (patch, ablation), one package as every method.
MAX_ROOT_ENTRIES = 24


def test_the_root_is_grouped_by_job():
  root = ROOT / "rsjax"
  entries = sorted(
    p.name
    for p in root.iterdir()
    if (p.suffix == ".py" and p.is_file()) or (p / "__init__.py").is_file()
  )
  assert len(entries) <= MAX_ROOT_ENTRIES, f"{len(entries)} entries at the root: {entries}"
