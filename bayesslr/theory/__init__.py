"""Asymptotic theory at finite ``alpha`` (docs/theory.md).

* :mod:`~bayesslr.theory.solver`: damped fixed-point iteration (NaN + flag on failure, never an
  exception in a sweep), watchdog, continuation in ``alpha``;
* :mod:`~bayesslr.theory.erm_proximal`: teacher channel samples (common random numbers) and the
  multi-start proximal step of ERM;
* :mod:`~bayesslr.theory.erm`: replica-symmetric ERM fixed point (softmax, linear, softplus,
  erf with fixed offset);
* :mod:`~bayesslr.theory.bayes`: Bayes-optimal state evolution and free entropy;
* :mod:`~bayesslr.theory.lam_opt`: the ``lam`` minimising the theoretical test error;
* :mod:`~bayesslr.theory.method`: registry entries ``theory_erm:<activation>``, ``theory_bayes``.
"""
