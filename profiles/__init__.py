"""Built-in YAML profiles (data only); found through the ``builtin`` plugin."""
