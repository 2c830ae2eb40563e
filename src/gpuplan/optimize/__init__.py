"""Plans: the best order of a trace by simulation-driven search, exact CP-SAT solving and proven bounds.

`plan_order` (search.py) is the entry point; `FixedOrder` (order.py) applies an order; `solve_exact` and
`strongest_bound` (cpsat.py) need OR-Tools, which is imported only when they run; plan.json is
planfile.py. docs/plan.md explains the method and what the numbers mean.
"""

from gpuplan.optimize.cpsat import ExactResult, solve_exact, strongest_bound
from gpuplan.optimize.evaluate import OBJECTIVES, Evaluator, objective_value
from gpuplan.optimize.order import FixedOrder
from gpuplan.optimize.planfile import PLAN_SCHEMA, plan_to_dict, read_plan, write_plan
from gpuplan.optimize.search import PlannedJob, PlanResult, plan_order

__all__ = [
    "OBJECTIVES",
    "PLAN_SCHEMA",
    "Evaluator",
    "ExactResult",
    "FixedOrder",
    "PlanResult",
    "PlannedJob",
    "objective_value",
    "plan_order",
    "plan_to_dict",
    "read_plan",
    "solve_exact",
    "strongest_bound",
    "write_plan",
]
