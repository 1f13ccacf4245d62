"""The Bayes-optimal estimator by sampling (spec section 6).

* :mod:`bayesslr.bayes.model`: NumPyro models (location marginalised; location enumerated);
* :mod:`bayesslr.bayes.sampler`: NUTS driver, start strategies, diagnostics;
* :mod:`bayesslr.bayes.predict`: posterior-mean predictions, test and oracle errors, overlaps;
* :mod:`bayesslr.bayes.arviz_adapter`: the only module touching ArviZ;
* :mod:`bayesslr.bayes.method`: the registered method ``bayes_sampling``.
"""
