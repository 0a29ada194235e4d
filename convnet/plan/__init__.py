"""Planning: from a net with device lists to a list of operations.

:mod:`convnet.plan.ops` defines the operations of a plan (load, forward,
copy, backward, gradient copy, all-reduce, update) and :class:`~convnet.plan.ops.Plan`;
:mod:`convnet.plan.planner` places every layer replica and builds the plan;
:mod:`convnet.plan.report` prints it (``--print-plan``) and
:mod:`convnet.plan.graph` draws it (``--plan-graph``).
"""

from convnet.plan.ops import Plan
from convnet.plan.planner import make_plan

__all__ = ["Plan", "make_plan"]
