"""Inference algorithms on the SLR posterior, scored against a Bayes-optimal reference."""
