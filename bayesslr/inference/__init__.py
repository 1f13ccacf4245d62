"""The ``inference`` family: inference algorithms on the SLR posterior under a gradient
budget, scored against the Bayes-optimal reference (docs/inference.md).

* :mod:`bayesslr.inference.method`: the registry entry (options, outputs, cost, memory,
  report role) and the cell;
* :mod:`bayesslr.inference.algorithms`: one record per algorithm (its starts, the options that
  apply, its runner, memory and draws), the one table a new algorithm is added to;
* :mod:`bayesslr.inference.mcmc`, :mod:`bayesslr.inference.vi`,
  :mod:`bayesslr.inference.smc`: the budgeted samplers, VI and MAP, SMC (parallel tempering is
  :mod:`bayesslr.bayes.pt`);
* :mod:`bayesslr.inference.evaluate`: the one error measurement; and
  :mod:`bayesslr.inference.reference`: the stored ground truth it scores against.

The public targets API built on this family is :mod:`bayesslr.posteriors`; the ground-truth
builder :mod:`bayesslr.ground_truth`; the studies run on it (the trapping map) are scripts
in ``benchmarks/studies/``.
"""
