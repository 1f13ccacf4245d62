"""Regularised empirical risk minimisation for attention predictors (docs/estimators.md).

* :mod:`bayesslr.erm.objective`: the objective and the prediction of a parameter dict;
* :mod:`bayesslr.erm.lbfgs`: one full-batch L-BFGS fit with a gradient-norm convergence test;
* :mod:`bayesslr.erm.protocol`: informed/random starts, restarts, batched ``lam`` grids,
  validation choice of ``lam``, seeds (:func:`run_erm_protocol`);
* :mod:`bayesslr.erm.gd`: plain gradient descent / Adam trajectories of the overlaps;
* :mod:`bayesslr.erm.method`: the ``erm`` and ``gd`` families of the method registry.
"""

from bayesslr.erm.gd import GDOptions, gd_trajectory
from bayesslr.erm.lbfgs import SolverResult, lbfgs_solve, lbfgs_solve_batch
from bayesslr.erm.protocol import ERMOptions, ERMResult, fit_seeds, run_erm_protocol, select_lam

__all__ = [
    "ERMOptions", "ERMResult", "GDOptions", "SolverResult", "run_erm_protocol", "fit_seeds",
    "gd_trajectory", "lbfgs_solve", "lbfgs_solve_batch", "select_lam",
]
