"""Analyses of a sweep's results that go beyond one figure (the finite-size study)."""
