"""Profiles: reading YAML with positions, parsing, composing, the catalog, the schema."""
