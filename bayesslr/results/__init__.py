"""Results below the report: loading a results directory or the shipped reference
(:mod:`~bayesslr.results.load`, :mod:`~bayesslr.results.reference`) and querying it
(:mod:`~bayesslr.results.query`)."""
