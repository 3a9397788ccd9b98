"""The engine: class counts of noisy inputs on device, and the one CERTIFY driver.

* :mod:`rsjax.engine.step`: the noise of sample ``j`` of input ``i`` and the
  counts of one chunk.
* :mod:`rsjax.engine.counts`: every chunk of a pass in one compiled program
  over the local devices (``sample_counts``).
* :mod:`rsjax.engine.batching`: the batch size (``"auto"``).
* :mod:`rsjax.engine.traced`: counts inside ``jit`` / ``vmap`` / ``grad``.
* :mod:`rsjax.engine.driver`: ``run_certify``, the sampling settings
  (``Sampling``), the sampling rule ``FixedN``.
* :mod:`rsjax.engine.cohen_rule`: Cohen et al.'s certificate
  (``certificate_from_counts``, ``CohenRule``, ``cohen_rule``, ``cohen_passes``).
* :mod:`rsjax.engine.budget`: the budgeted sampling rule ``Budget`` (sound
  early stopping on a radius grid).
* :mod:`rsjax.engine.anytime`: the budgeted sampling rule ``Anytime``
  (anytime-valid tests per grid level at every look).

The modules are imported on first use (``rsjax.engine.counts`` etc.).
"""

from rsjax import _lazy

__getattr__, __dir__, __all__ = _lazy.exports(
  __name__,
  {},
  submodules=("anytime", "batching", "budget", "cohen_rule", "counts", "driver", "step", "traced"),
)
