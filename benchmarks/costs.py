"""What one forward pass costs, counted from the model's jaxpr: ``rsjax.bench.costs`` (moved
there for ``rsjax bench``; the benchmarks import it from the library)."""

from rsjax.bench.costs import activation_elements, matmul_flops, op_costs

__all__ = ["activation_elements", "matmul_flops", "op_costs"]
