"""Figures that cannot drift: issue 40's section of ``benchmarks/RESULTS.md`` (budgeted
CERTIFY with ``Anytime``), each quoted number read from its committed JSON at the prose's
rounding: the simulated streams (``streams.json``), the MNIST run (``budgeted.json``), the
settings (``budgeted_anytime_share06.json``, ``anytime_settings/``) and the frontier
(``budgeted_frontier.json``). The forms and checks are those of ``tests/test_figures_results.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests import test_figures as tf
from tests import test_figures_results as fr
from tests.test_figures_results import (
  G,
  comma,
  d0,
  e1,
  f1,
  f2,
  f3,
  ints,
  pct0,
  pct1,
  pct2,
  thousands,
)

B = tf.B
STREAMS = B + "streams.json"
BUDGETED = B + "budgeted.json"
FRONTIER = B + "budgeted_frontier.json"
Line = fr.Line

# ---------------------------------------------------------------------------
# Issue 40: the streams (streams.json), the MNIST run (budgeted.json), the settings and the
# frontier (budgeted_frontier.json).

RULES = ("looks", "anytime", "fixed", "voracek", "betting")
STREAM_ROWS = {
  "0.5": "  0.5      {}    {}   {}    {}    {}     inf      inf",
  "0.6": "  0.6       {}      {}   {}      {}      {}     {}      {}",
  "0.7": "  0.7       {}      {}   {}      {}      {}      {}      {}",
  "0.8": "  0.8       {}      {}   {}     {}     {}      {}     {}",
  "0.9": "  0.9       {}      {}   {}      {}      {}     {}      {}",
  "0.95": "  0.95      {}      {}   {}      {}     {}     {}      {}",
  "0.99": "  0.99      {}     {}   {}     {}     {}    {}     {}",
  "0.999": "  0.999    {}    {}   {}    {}    {}  {}   {}",
  "0.9999": "  0.9999   {}     {}   {}    {}     {}    {}     {}",
  "1.0": "  1.0       {}     {}   {}     {}     {}     inf      inf",
}


def _stream_row(p: str) -> tuple[str, tuple[G, ...]]:
  figures = [d0(f"per_p/{p}/{rule}/mean_samples") for rule in RULES]
  if "inf" not in STREAM_ROWS[p]:
    figures += [d0(f"per_p/{p}/floor"), d0(f"per_p/{p}/floor_decide")]
  return STREAM_ROWS[p], tuple(figures)


RADII = ("0", "0.25", "0.5", "0.75", "1", "1.25", "1.5")
RUNS = ("mnist-lenet sigma=0.25", "mnist-lenet sigma=0.5", "cifar-shaped-lenet sigma=0.25")
#: The table's rows: each run's fixed, Budget and Anytime rows, in that order.
BUDGET_ROWS = (
  "  LeNet 0.25       fixed           {}            {}  {}    {}   ",
  "                   Budget           {}   {}x      {}    {}     {}   ",
  "                   Anytime           {}  {}x      {}    {}     {}   ",
  "  LeNet 0.5        fixed           {}            {}  {}    {}   ",
  "                   Budget           {}   {}x     {}   {}     {}   ",
  "                   Anytime          {}   {}x      {}    {}     {}   ",
  "  CIFAR-shaped     fixed           {}            {}   {}    {}   ",
  "    0.25           Budget            {}  {}x      {}    {}     {}   ",
  "                   Anytime           {}  {}x      {}    {}     {}   ",
)
ROW_RUNS = [(run, rule) for run in RUNS for rule in ("fixed", "budgeted", "anytime")]


def _to_n(run: str, rule: str) -> Callable[[Any], float]:
  def count(d: Any) -> float:
    return sum(s >= d["n"] for s in d["runs"][run][rule]["per_input"]["samples"])

  count.__name__ = f"inputs of {run} {rule} that ran to N"
  return count


def _budget_row(template: str, run: str, rule: str) -> tuple[str, tuple[G, ...]]:
  r = f"runs/{run}"
  ratio = {"budgeted": [f2(f"{r}/samples_ratio")], "anytime": [f2(f"{r}/samples_ratio_anytime")]}
  figures = [
    d0(f"{r}/{rule}/mean_samples"),
    *ratio.get(rule, []),
    d0(f"{r}/{rule}/samples/median"),
    ints(_to_n(run, rule)),
    d0(f"{r}/{rule}/wall_s"),
    *[f2(f"{r}/{rule}/certified_accuracy/{x}") for x in RADII],
  ]
  return template + " ".join(["{}"] * len(RADII)), tuple(figures)


SETTINGS_FILES = (
  (
    "weight 0,    looks 1.05      budgeted_anytime_share06.json       {}x ({})    {}x",
    "budgeted_anytime_share06.json",
  ),
  (
    "weight 0.5,  looks 1.05      anytime_settings/w0.5_ratio1.05.json {}x ({})    {}x",
    "anytime_settings/w0.5_ratio1.05.json",
  ),
  (
    "weight 0.5,  looks 1.01      budgeted.json (the defaults)         {}x ({})    {}x",
    "budgeted.json",
  ),
  (
    "weight 0.75, looks 1.01      anytime_settings/w0.75_ratio1.01.json {}x ({})   {}x",
    "anytime_settings/w0.75_ratio1.01.json",
  ),
  (
    "weight 0.9,  looks 1.01      anytime_settings/w0.9_ratio1.01.json {}x ({})    {}x",
    "anytime_settings/w0.9_ratio1.01.json",
  ),
  (
    "weight 0.99, looks 1.01      anytime_settings/w0.99_ratio1.01.json {}x ({})   {}x",
    "anytime_settings/w0.99_ratio1.01.json",
  ),
)
LENET25, LENET5 = "runs/mnist-lenet sigma=0.25", "runs/mnist-lenet sigma=0.5"


def _setting(template: str, name: str) -> Line:
  return Line(
    template,
    B + name,
    (
      f2(f"{LENET25}/samples_ratio_anytime"),
      d0(f"{LENET25}/anytime/samples/median"),
      f2(f"{LENET5}/samples_ratio_anytime"),
    ),
  )


def _frontier(share: float, w: float, field: str) -> str:
  return f"rows[share={share},w={w}]/{field}"


BLOCKS: list[fr.Block] = [
  fr.Block(
    "  p_A      looks  anytime    fixed  voracek  betting   floor  floor(decide)",
    STREAMS,
    tuple(_stream_row(p) for p in STREAM_ROWS),
  ),
  fr.Block(
    "  model, sigma     rule       mean samples  ratio  median  to N  wall s   certified",
    BUDGETED,
    tuple(_budget_row(t, *rr) for t, rr in zip(BUDGET_ROWS, ROW_RUNS, strict=True)),
  ),
]

LINES: list[fr.Line] = [
  *[_setting(t, name) for t, name in SETTINGS_FILES],
  Line(
    "* **8-value mix** (p_A 0.5 to 0.999): `anytime` {} samples per input, **{}x fewer than fixed",
    STREAMS,
    (comma("mix_mean_samples/anytime"), f2("mix_ratio_fixed/anytime")),
  ),
  Line(
    "N** (`looks`: {}, {}x).",
    STREAMS,
    (comma("mix_mean_samples/looks"), f2("mix_ratio_fixed/looks")),
  ),
  Line("`anytime` at **{}x** the", STREAMS, (f2("ratio_to_floor_decide/anytime"),)),
  Line(
    "decide floor and {}x the certify-only floor (`looks`: {}x and {}x; `voracek` {}x /",
    STREAMS,
    (
      f2("ratio_to_floor/anytime"),
      f2("ratio_to_floor_decide/looks"),
      f2("ratio_to_floor/looks"),
      f2("ratio_to_floor_decide/voracek"),
    ),
  ),
  Line(
    "  {}x; `betting` {}x / {}x).",
    STREAMS,
    (
      f2("ratio_to_floor/voracek"),
      f2("ratio_to_floor_decide/betting"),
      f2("ratio_to_floor/betting"),
    ),
  ),
  Line(
    "at p_A = 0.999 `anytime` {}% of streams",
    STREAMS,
    (pct2("per_p/0.999/anytime/lost_vs_fixed"),),
  ),
  Line(
    "(`looks`, the rule of today, {}% on the same streams; `voracek` {}%, `betting` {}%);",
    STREAMS,
    (
      pct2("per_p/0.999/looks/lost_vs_fixed"),
      pct1("per_p/0.999/voracek/lost_vs_fixed"),
      pct2("per_p/0.999/betting/lost_vs_fixed"),
    ),
  ),
  Line(
    "`anytime` certifies a higher level than fixed N on {}%. At p_A = 0.5, {}% for `looks` and",
    STREAMS,
    (pct1("per_p/0.999/anytime/gained_vs_fixed"), pct1("per_p/0.5/looks/lost_vs_fixed")),
  ),
  Line(
    "(`rsjax.engine.anytime.exact_error`): {}, {}, {}, {} at the thresholds of radii",
    STREAMS,
    tuple(e1(f"exact_error/anytime/{i}") for i in range(4)),
  ),
  Line(
    "0, 0.25, 0.5, 0.75 (0 beyond: out of reach at N), at most **{} <= alpha = 1e-3**; `looks`",
    STREAMS,
    (e1("exact_error/max/anytime"),),
  ),
  Line(
    "(the count ever reaching a look's threshold, `benchmarks.streams.crossing_probability`) at most {}. The",
    STREAMS,
    (e1("exact_error/max/looks"),),
  ),
  Line(
    "it), so their mix means ({}k, {}k) are above",
    STREAMS,
    (thousands("mix_mean_samples/voracek"), thousands("mix_mean_samples/betting")),
  ),
  Line(
    "(`to N`: inputs that ran to N. Wall: `Anytime` {}x, {}x and {}x less than fixed N.)",
    BUDGETED,
    tuple(f1(f"runs/{run}/wall_ratio_anytime") for run in RUNS),
  ),
  Line(
    "**Against issue 40's goals: sigma 0.5 met ({}x, goal 5.5x), sigma 0.25 missed ({}x, goal",
    BUDGETED,
    (f2(f"{LENET5}/samples_ratio_anytime"), f2(f"{LENET25}/samples_ratio_anytime")),
  ),
  Line(
    "0.99, shares 0.6 and 0.7: at share 0.6 the decide-floor ratio goes {}x, {}x, {}x, {}x,",
    FRONTIER,
    (
      *[f2(_frontier(0.6, w, "streams/ratio_to_floor_decide")) for w in (0.0, 0.5, 0.75)],
      f3(_frontier(0.6, 0.9, "streams/ratio_to_floor_decide")),
    ),
  ),
  Line(
    "{}x for weights 0, 0.5, 0.75, 0.9, 0.99;",
    FRONTIER,
    (f2(_frontier(0.6, 0.99, "streams/ratio_to_floor_decide")),),
  ),
  Line(
    "measured run with a look at every sample and no other digit slower: at most {}x at weight 0.5 and",
    FRONTIER,
    (f2(_frontier(0.6, 0.5, "mnist/ratio_at_most")),),
  ),
  Line(
    "{}x at 0.75, which the measured",
    FRONTIER,
    (f2(_frontier(0.6, 0.75, "mnist/ratio_at_most")),),
  ),
  Line(
    "{}x at weight 0.5) loses a level at p_A = 0.999 on {}% of the frontier's streams, against {}%",
    FRONTIER,
    (
      f2(_frontier(0.7, 0.5, "mnist/ratio_at_most")),
      pct0(_frontier(0.7, 0.5, "streams/lost_at_0.999")),
      pct1(_frontier(0.6, 0.5, "streams/lost_at_0.999")),
    ),
  ),
]

LINES += [
  Line(
    "needs), and the KT prior alone crosses at {}.",
    FRONTIER,
    (comma(_frontier(0.6, 0.0, "mnist/all_agree_stop_every_sample")),),
  ),
  Line(
    "are not met by any setting of this rule measured; `Anytime` uses {}x (sigma 0.25) and {}x (sigma",
    BUDGETED,
    tuple(
      f2(
        lambda d, r=r: (
          tf.lookup(d, f"{r}/samples_ratio_anytime") / tf.lookup(d, f"{r}/samples_ratio")
        )
      )
      for r in (LENET25, LENET5)
    ),
  ),
]


@pytest.mark.parametrize("bind", LINES, ids=lambda b: b.template[:48])
def test_quoted_figure_equals_its_json(bind):
  failures = fr.check_line(bind)
  assert not failures, "\n".join(failures)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.header.strip()[:32])
def test_table_rows_equal_their_json(block):
  failures = fr.check_block(block)
  assert not failures, "\n".join(failures)
