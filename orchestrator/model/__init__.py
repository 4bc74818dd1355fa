"""The step model: steps, their registry, device strings and ``when:`` conditions."""
