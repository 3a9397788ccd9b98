"""Noise: the families of smoothing noise and what the engine draws them with.

* :mod:`rsjax.noise.families`: ``Gaussian``, ``Laplace``, ``Uniform``,
  ``Gaussian8bit`` (the sound 8-bit noise) and ``get_noise``; each family's
  certified radius and its norm.
* :mod:`rsjax.noise.lattice`: the 8-bit noise's thresholds (exact, no JAX).
* :mod:`rsjax.noise.grid_draw`: drawing on that lattice on device.
* :mod:`rsjax.noise.sigma`: sigma sources, the noise of each input and what a
  certificate may assume about it (no JAX).

The names are imported on first use, so ``rsjax.noise.lattice`` and
``rsjax.noise.sigma`` import no JAX.
"""

from typing import TYPE_CHECKING

from rsjax import _lazy

if TYPE_CHECKING:
  from rsjax.noise.families import GAUSSIAN as GAUSSIAN
  from rsjax.noise.families import NOISES as NOISES
  from rsjax.noise.families import Gaussian as Gaussian
  from rsjax.noise.families import Gaussian8bit as Gaussian8bit
  from rsjax.noise.families import Laplace as Laplace
  from rsjax.noise.families import Noise as Noise
  from rsjax.noise.families import Uniform as Uniform
  from rsjax.noise.families import get_noise as get_noise
  from rsjax.noise.families import standard_normal as standard_normal

__getattr__, __dir__, __all__ = _lazy.exports(
  __name__,
  {
    "GAUSSIAN": "rsjax.noise.families",
    "Gaussian": "rsjax.noise.families",
    "Gaussian8bit": "rsjax.noise.families",
    "Laplace": "rsjax.noise.families",
    "NOISES": "rsjax.noise.families",
    "Noise": "rsjax.noise.families",
    "Uniform": "rsjax.noise.families",
    "get_noise": "rsjax.noise.families",
    "standard_normal": "rsjax.noise.families",
  },
  submodules=("families", "grid_draw", "lattice", "sigma"),
)
