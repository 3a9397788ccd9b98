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
  found = [f"{p.relative_to(ROOT.parent)}:{line}: from {mod} import {name}"
           for p in sorted(ROOT.rglob("*.py")) for line, mod, name in _private_imports(p)]
  assert not found, "\n".join(found)


def test_the_check_sees_an_underscore_import(tmp_path):
  bad = tmp_path / "bad.py"
  bad.write_text("from rsjax._certify import _nothing\nfrom rsjax import _memory\n")
  assert [name for _, _, name in _private_imports(bad)] == ["_nothing"]
