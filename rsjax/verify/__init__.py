"""Checking a run: every reported number again, with and without the model.

* :func:`verify` (``rsjax verify``, module ``rsjax.verify._verify``): every
  prediction, bound and radius recomputed from the recorded counts with NumPy
  and SciPy only (no model, no JAX).
  The formulas it recomputes with, written out again, and the table of legal
  claims that ``certify`` shares are :mod:`rsjax.claims`, at the bottom of the library.
* ``rsjax audit`` (the counts of a run's rows drawn again with its model) is
  :mod:`rsjax.app.audit`, above the library.

What each proves, under which threat model: ``docs/VERIFY.md``. The names are
imported on first use.
"""

from typing import TYPE_CHECKING

from rsjax import _lazy

if TYPE_CHECKING:
  from rsjax.verify._report import VerifyReport as VerifyReport
  from rsjax.verify._verify import Mismatch as Mismatch
  from rsjax.verify._verify import VerifyError as VerifyError
  from rsjax.verify._verify import read_run as read_run
  from rsjax.verify._verify import verifiable as verifiable
  from rsjax.verify._verify import verify as verify

__getattr__, __dir__, __all__ = _lazy.exports(
  __name__,
  {
    "Mismatch": "rsjax.verify._verify",
    "VerifyError": "rsjax.verify._verify",
    "VerifyReport": "rsjax.verify._report",
    "read_run": "rsjax.verify._verify",
    "verifiable": "rsjax.verify._verify",
    "verify": "rsjax.verify._verify",
  },
)
