"""The convolutions and matrix products of a traced program (tests of precision and dtype)."""

from collections.abc import Iterator

OPS = ("conv_general_dilated", "dot_general")


def matmul_eqns(jaxpr) -> Iterator:
  """Every ``conv_general_dilated`` / ``dot_general`` equation of a jaxpr and its sub-jaxprs."""
  for eqn in jaxpr.eqns:
    if eqn.primitive.name in OPS:
      yield eqn
    for value in eqn.params.values():
      for sub in value if isinstance(value, (tuple, list)) else (value,):
        if hasattr(sub, "eqns"):  # a Jaxpr (duck-typed: JAX moves these classes around)
          yield from matmul_eqns(sub)
        elif hasattr(sub, "jaxpr") and hasattr(sub.jaxpr, "eqns"):  # a ClosedJaxpr
          yield from matmul_eqns(sub.jaxpr)


def all_eqns(jaxpr) -> Iterator:
  """Every equation of a jaxpr and of its sub-jaxprs (loop bodies, branches, shard_map)."""
  for eqn in jaxpr.eqns:
    yield eqn
    for value in eqn.params.values():
      for sub in value if isinstance(value, (tuple, list)) else (value,):
        if hasattr(sub, "eqns"):
          yield from all_eqns(sub)
        elif hasattr(sub, "jaxpr") and hasattr(sub.jaxpr, "eqns"):
          yield from all_eqns(sub.jaxpr)
