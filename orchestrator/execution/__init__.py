"""Execution: run context, step invocation, executors, runs and signals."""
