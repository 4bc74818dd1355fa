"""Resolution: the step graph, the resolver and the resulting plan."""
