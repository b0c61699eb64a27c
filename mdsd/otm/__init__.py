"""Exact optimal multi-draft acceptance (the OTM problem): four solvers behind one call.

``solve_otm`` returns an :class:`OTMResult` (value and certificate), ``optimal_acceptance`` the value
alone (batched over leading axes for the dual), ``optimal_acceptance_table`` many k and laws from one sort,
``optimal_coupling`` a whole optimal plan, ``optimal_selection_law`` the law of the draft an optimal
two-step verifier selects (docs/mathematics.md §6). See docs/mathematics.md §1.
"""

from mdsd.laws import law_from_name  # re-exported: the registry lives in mdsd.laws
from mdsd.otm.result import OTMResult
from mdsd.otm.selection import SelectionLaw, optimal_selection_law
from mdsd.otm.solve import (
    METHODS,
    optimal_acceptance,
    optimal_acceptance_table,
    optimal_coupling,
    solve_otm,
)

__all__ = [
    "METHODS",
    "OTMResult",
    "SelectionLaw",
    "law_from_name",
    "optimal_acceptance",
    "optimal_acceptance_table",
    "optimal_coupling",
    "optimal_selection_law",
    "solve_otm",
]
