"""Structure of the package: no module imports another module's underscore names."""

import ast
import pathlib

import rsjax

ROOT = pathlib.Path(rsjax.__file__).parent


def _private_imports(path: pathlib.Path):
  """``(line, module, name)`` of every ``from M import _name`` that is not a submodule of M."""
  tree = ast.parse(path.read_text())
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rsjax"):
      pkg = ROOT.parent.joinpath(*node.module.split("."))
      for alias in node.names:
        is_submodule = (pkg / f"{alias.name}.py").exists() or (pkg / alias.name).is_dir()
        if alias.name.startswith("_") and not alias.name.startswith("__") and not is_submodule:
          yield node.lineno, node.module, alias.name


def test_no_cross_module_import_of_underscore_names():
  found = [
    f"{p.relative_to(ROOT.parent)}:{line}: from {mod} import {name}"
    for p in sorted(ROOT.rglob("*.py"))
    for line, mod, name in _private_imports(p)
  ]
  assert not found, "\n".join(found)


def test_the_check_sees_an_underscore_import(tmp_path):
  bad = tmp_path / "bad.py"
  bad.write_text(
    "from rsjax.engine.driver import _nothing\nfrom rsjax.engine import counts as _sampling\n"
  )
  assert [name for _, _, name in _private_imports(bad)] == ["_nothing"]


def _underscore_uses(path: pathlib.Path):
  """``(line, text)`` of every import of an underscore module or name of rsjax."""
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rsjax"):
      parts = node.module.split(".") + [a.name for a in node.names]
      if any(p.startswith("_") and not p.startswith("__") for p in parts):
        yield node.lineno, f"from {node.module} import {', '.join(a.name for a in node.names)}"
    elif isinstance(node, ast.Import):
      for a in node.names:
        if a.name.startswith("rsjax") and any(p.startswith("_") for p in a.name.split(".")):
          yield node.lineno, f"import {a.name}"


def test_scripts_use_only_the_public_api():
  """Benchmarks and experiments are users of rsjax: they import no private module or name."""
  found = [
    f"{p.relative_to(ROOT.parent)}:{line}: {text}"
    for d in ("benchmarks", "experiments")
    for p in sorted(ROOT.parent.joinpath(d).glob("*.py"))
    for line, text in _underscore_uses(p)
  ]
  assert not found, "\n".join(found)
