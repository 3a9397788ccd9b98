"""What every method's check is built from: ``rsjax verify``'s formulas and row readers.

NumPy and SciPy only (no JAX, no model, no device). A method's check (its
``Method.check``, in its own package) derives each row's prediction and radius
again from the row's certificate record with these, written out again here
rather than by calling the code that produced them: the Clopper-Pearson bounds
and radii (``cp_lower``, ``binary_radius``, ``multiclass``), the budgeted
looks and alpha levels, the anytime rule's mixture thresholds, the counts of a row (``read_rows``), Cohen's
certificate from them (``cohen_certificate``), the ablation methods' certificates
(``patch_certificate``, ``l0_certificate``) and the comparison with the
file (``compare``), each difference a :class:`Mismatch`; the budgeted rules'
stopping decision at a look (``looks_decision``, ``anytime_stop``: the engine's rules
call them too) and the check that a row which stopped before N meets it there
(``looks_stop_issues``, ``anytime_stop_issues``); and the one table of legal
claims (:func:`refusal`), which ``Method.build`` and ``rsjax verify`` share.

The names are imported from their modules on first use: the flags of the commands read
``PACKS``, ``NOISES`` and ``PRECISIONS`` without the SciPy of the formulas.
"""

from rsjax import _lazy

__getattr__, __dir__, __all__ = _lazy.exports(
  __name__,
  {
    "l0_certificate": "rsjax.claims._ablation",
    "patch_certificate": "rsjax.claims._ablation",
    "patch_positions": "rsjax.claims._ablation",
    "patch_reach": "rsjax.claims._ablation",
    "ANYTIME_RULE": "rsjax.claims._anytime",
    "anytime_certificate": "rsjax.claims._anytime",
    "anytime_levels": "rsjax.claims._anytime",
    "anytime_stop_issues": "rsjax.claims._anytime",
    "anytime_table_issues": "rsjax.claims._anytime",
    "thresholds_digest": "rsjax.claims._anytime",
    "ALPHA_MAX": "rsjax.claims._claims",
    "GAUSSIAN": "rsjax.claims._claims",
    "NOISES": "rsjax.claims._claims",
    "PACKS": "rsjax.claims._claims",
    "PRECISIONS": "rsjax.claims._claims",
    "Claim": "rsjax.claims._claims",
    "alpha_refusal": "rsjax.claims._claims",
    "every_claim": "rsjax.claims._claims",
    "refusal": "rsjax.claims._claims",
    "P_LOWER_MARGIN": "rsjax.claims._formulas",
    "RADIUS_MARGIN": "rsjax.claims._formulas",
    "binary_radius": "rsjax.claims._formulas",
    "budget_alphas": "rsjax.claims._formulas",
    "budget_looks": "rsjax.claims._formulas",
    "cp_lower": "rsjax.claims._formulas",
    "cp_upper": "rsjax.claims._formulas",
    "directed": "rsjax.claims._formulas",
    "multiclass": "rsjax.claims._formulas",
    "round_down": "rsjax.claims._formulas",
    "split_alpha": "rsjax.claims._formulas",
    "Mismatch": "rsjax.claims._mismatch",
    "VerifyError": "rsjax.claims._mismatch",
    "anytime_looks": "rsjax.claims._mixture",
    "level_probability": "rsjax.claims._mixture",
    "mixture_log_wealth": "rsjax.claims._mixture",
    "mixture_thresholds": "rsjax.claims._mixture",
    "nested_level": "rsjax.claims._mixture",
    "Rows": "rsjax.claims._rows",
    "budget_levels": "rsjax.claims._rows",
    "cohen_certificate": "rsjax.claims._rows",
    "compare": "rsjax.claims._rows",
    "dense": "rsjax.claims._rows",
    "drawn_sigma": "rsjax.claims._rows",
    "read_rows": "rsjax.claims._rows",
    "run_sigma": "rsjax.claims._rows",
    "anytime_need": "rsjax.claims._stopping",
    "anytime_stop": "rsjax.claims._stopping",
    "cp_count": "rsjax.claims._stopping",
    "looks_decision": "rsjax.claims._stopping",
    "looks_stop_issues": "rsjax.claims._stopping",
    "radius_level": "rsjax.claims._stopping",
    "stop_quantile": "rsjax.claims._stopping",
  },
)
