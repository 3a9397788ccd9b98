"""What every method's check is built from: ``rsjax verify``'s formulas and row readers.

NumPy and SciPy only (no JAX, no model, no device). A method's check (its
``Method.check``, in its own package) derives each row's prediction and radius
again from the row's certificate record with these, written out again here
rather than by calling the code that produced them: the Clopper-Pearson bounds
and radii (``cp_lower``, ``binary_radius``, ``multiclass``), the budgeted
looks and alpha levels, the anytime rule's mixture thresholds, the counts of a row (``read_rows``), Cohen's
certificate from them (``cohen_certificate``) and the comparison with the
file (``compare``), each difference a :class:`Mismatch`; the budgeted rules'
stopping decision at a look (``looks_decision``, ``anytime_stop``: the engine's rules
call them too) and the check that a row which stopped before N meets it there
(``looks_stop_issues``, ``anytime_stop_issues``); and the one table of legal
claims (:func:`refusal`), which ``Method.build`` and ``rsjax verify`` share.
"""

from rsjax.claims._anytime import ANYTIME_RULE as ANYTIME_RULE
from rsjax.claims._anytime import anytime_certificate as anytime_certificate
from rsjax.claims._anytime import anytime_levels as anytime_levels
from rsjax.claims._anytime import anytime_stop_issues as anytime_stop_issues
from rsjax.claims._anytime import anytime_table_issues as anytime_table_issues
from rsjax.claims._anytime import thresholds_digest as thresholds_digest
from rsjax.claims._claims import ALPHA_MAX as ALPHA_MAX
from rsjax.claims._claims import GAUSSIAN as GAUSSIAN
from rsjax.claims._claims import NOISES as NOISES
from rsjax.claims._claims import PACKS as PACKS
from rsjax.claims._claims import PRECISIONS as PRECISIONS
from rsjax.claims._claims import Claim as Claim
from rsjax.claims._claims import alpha_refusal as alpha_refusal
from rsjax.claims._claims import every_claim as every_claim
from rsjax.claims._claims import refusal as refusal
from rsjax.claims._formulas import P_LOWER_MARGIN as P_LOWER_MARGIN
from rsjax.claims._formulas import RADIUS_MARGIN as RADIUS_MARGIN
from rsjax.claims._formulas import binary_radius as binary_radius
from rsjax.claims._formulas import budget_alphas as budget_alphas
from rsjax.claims._formulas import budget_looks as budget_looks
from rsjax.claims._formulas import cp_lower as cp_lower
from rsjax.claims._formulas import cp_upper as cp_upper
from rsjax.claims._formulas import directed as directed
from rsjax.claims._formulas import multiclass as multiclass
from rsjax.claims._formulas import round_down as round_down
from rsjax.claims._formulas import split_alpha as split_alpha
from rsjax.claims._mismatch import Mismatch as Mismatch
from rsjax.claims._mismatch import VerifyError as VerifyError
from rsjax.claims._mixture import anytime_looks as anytime_looks
from rsjax.claims._mixture import level_probability as level_probability
from rsjax.claims._mixture import mixture_log_wealth as mixture_log_wealth
from rsjax.claims._mixture import mixture_thresholds as mixture_thresholds
from rsjax.claims._mixture import nested_level as nested_level
from rsjax.claims._rows import Rows as Rows
from rsjax.claims._rows import budget_levels as budget_levels
from rsjax.claims._rows import cohen_certificate as cohen_certificate
from rsjax.claims._rows import compare as compare
from rsjax.claims._rows import dense as dense
from rsjax.claims._rows import drawn_sigma as drawn_sigma
from rsjax.claims._rows import read_rows as read_rows
from rsjax.claims._rows import run_sigma as run_sigma
from rsjax.claims._stopping import anytime_need as anytime_need
from rsjax.claims._stopping import anytime_stop as anytime_stop
from rsjax.claims._stopping import cp_count as cp_count
from rsjax.claims._stopping import looks_decision as looks_decision
from rsjax.claims._stopping import looks_stop_issues as looks_stop_issues
from rsjax.claims._stopping import radius_level as radius_level
from rsjax.claims._stopping import stop_quantile as stop_quantile
