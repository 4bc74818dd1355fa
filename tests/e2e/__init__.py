"""Real start-ups: torch, gloo, Mooncake and torchrun on this machine (marked ``e2e``)."""
