"""luminal.functional: the high-level ops as functions (torch.* and torch.nn.functional names)."""

from luminal.hl.activation import *  # noqa: F403
from luminal.hl.attention import *  # noqa: F403
from luminal.hl.combine import *  # noqa: F403
from luminal.hl.comparison import *  # noqa: F403
from luminal.hl.conv import *  # noqa: F403
from luminal.hl.creation import *  # noqa: F403
from luminal.hl.elementwise import *  # noqa: F403
from luminal.hl.indexing import *  # noqa: F403
from luminal.hl.linalg import *  # noqa: F403
from luminal.hl.movement import *  # noqa: F403
from luminal.hl.normalization import *  # noqa: F403
from luminal.hl.reduction import *  # noqa: F403
from luminal.hl.rounding import *  # noqa: F403
