"""GAMP for single-location regression: the algorithm whose state evolution is the theory.

* :func:`~bayesslr.amp.gamp.gamp` runs generalized approximate message passing on training data
  (docs/amp.md; derivation in ``docs/amp.md``), :func:`~bayesslr.amp.gamp.gamp_predict`
  turns its Gaussian marginals into the posterior-mean prediction on test inputs;
* :mod:`~bayesslr.amp.denoisers`: output functions (the state evolution's ``Z_out``) and prior;
* :func:`~bayesslr.amp.data.amp_task_data`: the suite's data for a seed, one ``X`` at a time;
* :mod:`~bayesslr.amp.method`: the registered family ``amp``.
"""

from bayesslr.amp.data import amp_task_data, amp_test_data, amp_train_data
from bayesslr.amp.gamp import GampOptions, GampResult, GampState, gamp, gamp_predict

__all__ = ["GampOptions", "GampResult", "GampState", "amp_task_data", "amp_test_data",
           "amp_train_data", "gamp", "gamp_predict"]
