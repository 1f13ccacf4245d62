"""Regularised empirical risk minimisation for attention predictors (spec sections 2 and 4).

* :mod:`bayesslr.erm.objective`: the objective, the overlaps and the test errors;
* :mod:`bayesslr.erm.lbfgs`: one full-batch L-BFGS fit with a gradient-norm convergence test;
* :mod:`bayesslr.erm.protocol`: informed/random starts, restarts, batched ``lam`` grids,
  validation choice of ``lam``, seeds (:func:`erm_fit`);
* :mod:`bayesslr.erm.gd`: plain gradient descent / Adam trajectories of the overlaps;
* :mod:`bayesslr.erm.method`: the ``erm`` family of the method registry.
"""

from bayesslr.erm.gd import gd_trajectory
from bayesslr.erm.lbfgs import SolverResult, lbfgs_solve, lbfgs_solve_batch
from bayesslr.erm.objective import OVERLAP_NAMES, TestErrors, overlaps, test_errors
from bayesslr.erm.protocol import ERMOptions, ERMResult, erm_fit, fit_seeds, select_lam

__all__ = [
    "OVERLAP_NAMES", "ERMOptions", "ERMResult", "SolverResult", "TestErrors", "erm_fit",
    "fit_seeds", "gd_trajectory", "lbfgs_solve", "lbfgs_solve_batch", "overlaps", "select_lam",
    "test_errors",
]
