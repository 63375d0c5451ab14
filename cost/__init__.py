"""Cost policies: facts about candidates, policies that rank them and bound their run time.

``from tvm_ext.cost import RooflinePolicy, evaluate``; ``evaluate(policy, sch, target)`` is the
validated path every caller goes through.
"""

from .features import BlockFacts, CandidateFeatures, features
from .learned import XGBoostPolicy
from .policy import Cost, ExecutionCostPolicy, evaluate, hard_constraints
from .roofline import RooflinePolicy, floor_s
from .service import ServicePolicy, ServiceProfile, calibrate
from .training_data import dataset

__all__ = [
    "BlockFacts",
    "CandidateFeatures",
    "Cost",
    "ExecutionCostPolicy",
    "RooflinePolicy",
    "ServicePolicy",
    "ServiceProfile",
    "XGBoostPolicy",
    "calibrate",
    "dataset",
    "evaluate",
    "features",
    "floor_s",
    "hard_constraints",
]
