"""The fast tier: one folder per layer of the code under test, one file per module."""
