"""The toy third engine the kit's tests integrate: one ``Engine`` value, nothing else."""

from __future__ import annotations

from initorch.kit import Engine

TOY = Engine(name="Toy", package="toyengine", distributions=("toy-engine",),
             marker="core/server.py", command="toy", integration="initorch-toy")
