"""Every timing of ``rsjax bench`` in rounds, with its spread.

A round calls the timed function again and again until it has run :data:`ROUND_S` seconds (one
call when a call takes longer); a figure is :data:`ROUNDS` rounds at least (more where more
calls are asked for: every image of ``--images`` is timed). Its samples per second are given as
the minimum, the median and the maximum over the rounds; the median is the figure quoted. Rounds
further apart than :data:`BUSY_SPREAD` (maximum over minimum) mean that something else took the
machine meanwhile: :data:`BUSY` is printed beside them.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

__all__ = ["BUSY", "BUSY_SPREAD", "ROUNDS", "ROUND_S", "Rounds", "seconds", "time_rounds"]

#: Rounds of a timing at least.
ROUNDS = 3
#: Seconds of a round at least (calls are grouped until it has run that long).
ROUND_S = 1.0
#: Rounds further apart than this (max / min of their samples per second): a busy machine.
BUSY_SPREAD = 1.2
BUSY = "busy machine: these figures are not to be trusted"


@dataclasses.dataclass(frozen=True)
class Rounds:
  """The rounds of one timing: the calls of each, its seconds, the samples of one call."""

  calls: tuple[int, ...]
  seconds: tuple[float, ...]
  samples: int

  @property
  def rates(self) -> list[float]:
    """Samples per second of each round."""
    return [self.samples * c / s for c, s in zip(self.calls, self.seconds, strict=True)]

  @property
  def per_call(self) -> list[float]:
    """Seconds per call of each round."""
    return [s / c for c, s in zip(self.calls, self.seconds, strict=True)]

  @property
  def median(self) -> float:
    """Samples per second, median over the rounds: the figure quoted."""
    return self.samples / statistics.median(self.per_call)

  @property
  def spread(self) -> float:
    """The fastest round's samples per second over the slowest's."""
    return max(self.rates) / min(self.rates)

  @property
  def busy(self) -> bool:
    return self.spread > BUSY_SPREAD

  def as_dict(self) -> dict[str, Any]:
    """``samples_per_s`` (the median) and its minimum, median and maximum, the spread, busy,
    and each round's calls and seconds."""
    return {
      "samples_per_s": self.median,
      "samples_per_s_min": min(self.rates),
      "samples_per_s_median": self.median,
      "samples_per_s_max": max(self.rates),
      "spread": self.spread,
      "busy": self.busy,
      "rounds": [{"calls": c, "seconds": s} for c, s in zip(self.calls, self.seconds, strict=True)],
    }


def seconds(call: Callable[[], Any], clock: Callable[[], float] = time.perf_counter) -> float:
  """The seconds one ``call()`` takes (a first call, timed apart from the rounds)."""
  start = clock()
  call()
  return clock() - start


def time_rounds(
  call: Callable[[int], Any],
  samples: int,
  *,
  min_calls: int = 1,
  tick: Callable[[], Any] | None = None,
  clock: Callable[[], float] = time.perf_counter,
) -> Rounds:
  """Times ``call(i)`` (``i``: 0, 1, ... over all rounds; ``samples`` samples a call) in
  :data:`ROUNDS` rounds of :data:`ROUND_S` seconds at least, and more rounds until
  ``min_calls`` calls have run; ``tick()`` after each call (a progress bar)."""
  calls: list[int] = []
  seconds: list[float] = []
  i = 0
  while len(calls) < ROUNDS or i < min_calls:
    start, n = clock(), 0
    while True:
      call(i)
      i, n = i + 1, n + 1
      if tick is not None:
        tick()
      elapsed = clock() - start
      if elapsed >= ROUND_S:
        break
    calls.append(n)
    seconds.append(elapsed)
  return Rounds(tuple(calls), tuple(seconds), int(samples))
