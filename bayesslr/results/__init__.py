"""Results below the report: loading a results directory or the shipped reference
(:mod:`~bayesslr.results.load`, :mod:`~bayesslr.results.reference`), querying it
(:mod:`~bayesslr.results.query`), and the analyses that go beyond one figure
(:mod:`~bayesslr.results.finite_size`, the finite-size study)."""
