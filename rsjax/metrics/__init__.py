"""Metrics of certification results: certified accuracy, ACR, abstention, envelopes.

All functions work on host NumPy arrays of one row per test input, as read by
:mod:`rsjax.records.io` (``correct`` bool, ``radius`` float, ``predict`` int with -1 for
abstain). An abstention always counts as wrong: its ``correct`` is 0 and its
radius 0.0, and when ``predict`` is given it is also masked explicitly.

* certified accuracy at radius r: ``mean(correct & (radius >= r))`` (Cohen et al.);
* ACR (average certified radius): ``mean(where(correct, radius, 0))`` over all inputs;
* the best-over-sigma envelope: the maximum certified accuracy over several
  result files (one per sigma or per method) at each radius.

Sun et al. ("ACR is a poor metric for RS", seed 003) show that ACR can be
inflated by a trivial classifier and recommend reporting certified accuracy at
several radii and letting sigma vary per radius (the envelope), so
:func:`summarize` and :func:`format_table` always print the certified
accuracies next to the ACR. The analyses they recommend are here too: ``p_A``
of each input from the saved estimation counts (:func:`label_probability`),
certified accuracy on easy vs hard inputs (:func:`easy_hard_accuracy`), and
Theorem 1 made concrete (:func:`constant_classifier_budget`).
"""

from rsjax.metrics._accuracy import abstention_rate as abstention_rate
from rsjax.metrics._accuracy import acr as acr
from rsjax.metrics._accuracy import average_certified_radius as average_certified_radius
from rsjax.metrics._accuracy import best_over_sigma as best_over_sigma
from rsjax.metrics._accuracy import certified_accuracy as certified_accuracy
from rsjax.metrics._accuracy import envelope as envelope
from rsjax.metrics._accuracy import format_table as format_table
from rsjax.metrics._accuracy import high_prob_certified_accuracy as high_prob_certified_accuracy
from rsjax.metrics._accuracy import radius_grid as radius_grid
from rsjax.metrics._accuracy import samples_summary as samples_summary
from rsjax.metrics._accuracy import summarize as summarize
from rsjax.metrics._acr_study import COUNTS_COLUMN as COUNTS_COLUMN
from rsjax.metrics._acr_study import constant_classifier_budget as constant_classifier_budget
from rsjax.metrics._acr_study import easy_hard_accuracy as easy_hard_accuracy
from rsjax.metrics._acr_study import format_counts as format_counts
from rsjax.metrics._acr_study import label_probability as label_probability
from rsjax.metrics._acr_study import parse_counts as parse_counts

#: Every name imported above.
__all__ = sorted(name for name in dir() if not name.startswith("_"))
