"""luminal.functional: the high-level ops as functions (torch.* and torch.nn.functional names)."""

from luminal.hl.elementwise import *  # noqa: F403
from luminal.hl.movement import *  # noqa: F403
from luminal.hl.reduction import *  # noqa: F403
