"""Multi-head single-location regression: several hidden directions, several heads
(docs/multihead.md).

The task and the Bayes predictor are in :mod:`bayesslr.multihead.task` (re-exported here), the
trained students in :mod:`bayesslr.multihead.erm`, the sampled Bayes-optimal estimator in
:mod:`bayesslr.multihead.sampling`; :mod:`bayesslr.multihead.method` registers them as the
``multihead`` family (task variant ``multihead``; members ``softmax``, ``softmax1``,
``bayes_softmax``, ``bayes_sampling``), which the sweep, the report and ``bayesslr multihead``
reach through the registry.
"""

from bayesslr.multihead.task import *  # noqa: F403 (the names of task.__all__)
from bayesslr.multihead.task import __all__  # noqa: F401
