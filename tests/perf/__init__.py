"""Guards on how the code scales, timed on this machine (marked ``perf``)."""
