"""What every floor uses: the task and its data contract, options, activations, metrics and the
JAX set-up."""
