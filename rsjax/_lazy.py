"""Packages whose names are imported on first use (PEP 562).

A method package's ``__init__`` hands on names from its submodules lazily, so
that importing one JAX-free submodule (its ``method`` value, its check) does
not import JAX through the package. :func:`module` does the same for one module a
JAX-free start-up need not pay for (SciPy's ``stats`` and ``special``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def exports(
  package: str, table: Mapping[str, str], submodules: tuple[str, ...] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
  """``(__getattr__, __dir__, __all__)`` of a package whose ``name`` lives in module
  ``table[name]``; ``__all__`` is the table's names, sorted (derived, not written twice).

  Args:
    package: the package's ``__name__``.
    table: ``{name: dotted module}``; each name is imported from its module on
      first access and kept in the package's namespace.
    submodules: submodules imported on first access as attributes
      (``package.name``).
  """
  namespace = importlib.import_module(package).__dict__

  def __getattr__(name: str) -> Any:
    if name in submodules:
      value = importlib.import_module(f"{package}.{name}")
    elif name not in table:
      raise AttributeError(f"module {package!r} has no attribute {name!r}")
    else:
      value = getattr(importlib.import_module(table[name]), name)
    namespace[name] = value  # the next access is a plain attribute lookup
    return value

  def __dir__() -> list[str]:
    return sorted(set(namespace) | set(table) | set(submodules))

  return __getattr__, __dir__, sorted(table)


class _Module:
  """A module imported on its first attribute access (:func:`module`)."""

  def __init__(self, name: str) -> None:
    self._name = name
    self._module: Any = None

  def __getattr__(self, attr: str) -> Any:
    if self._module is None:
      self._module = importlib.import_module(self._name)
    return getattr(self._module, attr)


def module(name: str) -> Any:
  """Module ``name`` (e.g. ``"scipy.stats"``), imported when one of its attributes is first
  read: ``stats = module("scipy.stats")`` costs nothing until ``stats.norm`` runs."""
  return _Module(name)
