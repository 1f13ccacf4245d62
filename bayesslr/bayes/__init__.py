"""The Bayes-optimal estimator by sampling (docs/model.md §6).

* :mod:`bayesslr.bayes.model`: NumPyro models (location marginalised; location enumerated);
* :mod:`bayesslr.bayes.nuts`: the NUTS layer (kernel, warm-ups, chain methods, diagnostics)
  under both NUTS faces, this family's sampler and the inference benchmark's budgeted MCMC;
* :mod:`bayesslr.bayes.sampler`: the ``bayes_sampling`` face: options, starts, annealing;
* :mod:`bayesslr.bayes.warmup`: the NUTS transition and its gradient-based warm-up;
* :mod:`bayesslr.bayes.predict`: posterior-mean predictions, test and oracle errors, overlaps;
* :mod:`bayesslr.bayes.arviz_adapter`: the only module touching ArviZ;
* :mod:`bayesslr.bayes.posterior`: the posterior of given data as one object (Python API);
* :mod:`bayesslr.bayes.method`: the registered method ``bayes_sampling``.
"""

from bayesslr.bayes.posterior import Posterior, sample_posterior
from bayesslr.bayes.sampler import SampleResult, SamplerOptions

__all__ = ["Posterior", "SampleResult", "SamplerOptions", "sample_posterior"]
