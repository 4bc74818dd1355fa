"""The version of initorch: the one place it is written.

``pyproject.toml`` reads it (``[tool.setuptools.dynamic]``) without importing the
package, and ``initorch.__version__`` and ``initorch --version`` re-export it.
"""

__version__ = "0.1.0"
