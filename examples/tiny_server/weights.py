"""``python -m tiny_server.weights PATH``: write the model's weights once.

The weights are seeded random numbers, the same on every machine; nothing is
downloaded.  The launcher only loads them (``model.path``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tiny_server.model import TinyConfig, generate_weights


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="where to write (the profile's model.path)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--force", action="store_true", help="rewrite an existing file")
    args = parser.parse_args(argv)
    path = args.path.expanduser()
    if path.exists() and not args.force:
        print(f"{path} exists (use --force to rewrite it)")
        return 0
    generate_weights(path, TinyConfig(), seed=args.seed)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
