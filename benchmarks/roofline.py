"""The roofline of the GPU suite (docs/PERFORMANCE.md): the attainable peaks of a device and
the bound, compute or memory, of a number of forward passes. Kept in ``rsjax.bench.peaks``
(``rsjax bench`` states the same bound); imported from there."""

from rsjax.bench.peaks import DEVICE_PEAKS, bound_seconds, device_peaks

__all__ = ["DEVICE_PEAKS", "bound_seconds", "device_peaks"]
