"""Multi-head single-location regression: several hidden directions, several heads
(docs/multihead.md).

Not yet registered as a method family, nor exposed at the top level of :mod:`bayesslr`: import
from :mod:`bayesslr.multihead.task` (or from here).
"""

from bayesslr.multihead.task import *  # noqa: F403 (the names of task.__all__)
from bayesslr.multihead.task import __all__  # noqa: F401
