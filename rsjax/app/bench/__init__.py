"""``rsjax bench``: how many noisy samples per second a model certifies, in which precision,
how far from the device's limit.

* :mod:`rsjax.app.bench.costs`: FLOPs and output elements per sample, counted in the traced
  program (the same on every backend);
* :mod:`rsjax.app.bench.peaks`: the vendors' peaks (H100, H200, A100, TPU v4, v5e, v5p), the GPU
  suite's attainable ones, and the bound (compute or memory) of a certification;
* :mod:`rsjax.app.bench.probe`: a CPU's peaks, measured (a timed matmul, a timed copy);
* :mod:`rsjax.app.bench.machine`: the machine, the versions, the peak memory;
* :mod:`rsjax.app.bench.target`: the model to time, loaded through ``rsjax.app.launch``;
* :mod:`rsjax.app.bench.layout`: the layout of its convolutions, and the network channels-last;
* :mod:`rsjax.app.bench.rounds`: every timing in rounds (3 of 1 s at least): minimum, median,
  maximum, and a busy machine told;
* :mod:`rsjax.app.bench.harness`: ``rsjax.certify`` timed (compile apart), extrapolated to N;
* :mod:`rsjax.app.bench.sweep`: samples per second against the batch size, the run's batch beside
  the best one, and its plot;
* :mod:`rsjax.app.bench.run`: one benchmark, every figure in one dict;
* :mod:`rsjax.app.bench.report`: that dict as text and as JSON;
* :mod:`rsjax.app.bench.ablation`: ``--method patch`` / ``ablation``, the ablation workloads
  (positions or ablated samples per second) through ``rsjax.certify`` with their certifiers.
"""

from rsjax.app.bench.costs import activation_elements as activation_elements
from rsjax.app.bench.costs import matmul_flops as matmul_flops
from rsjax.app.bench.costs import op_costs as op_costs
from rsjax.app.bench.peaks import PUBLISHED as PUBLISHED
from rsjax.app.bench.peaks import Peaks as Peaks
from rsjax.app.bench.peaks import bound_seconds as bound_seconds
from rsjax.app.bench.run import Request as Request
from rsjax.app.bench.run import bench as bench
from rsjax.app.bench.target import Source as Source
from rsjax.app.bench.target import Target as Target
from rsjax.app.bench.target import load_target as load_target

__all__ = [
  "PUBLISHED",
  "Peaks",
  "Request",
  "Source",
  "Target",
  "activation_elements",
  "bench",
  "bound_seconds",
  "load_target",
  "matmul_flops",
  "op_costs",
]
