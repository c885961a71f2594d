"""Shrink the PNGs committed under docs/ (what `pong-mp plot` drew) to 256 colours.

    .venv/bin/python scripts/shrink_png.py docs/pong-held-out-seeds.png ...

A plot has a few line colours and their anti-aliased edges: a palette of 256 keeps it
looking the same at a third of the bytes, which every clone of the repository carries.
"""

from __future__ import annotations

import sys
from pathlib import Path

from PIL import Image

COLOURS = 256


def shrink(path: Path) -> tuple[int, int]:
    """Rewrite the PNG at `path` with a palette of COLOURS; its (old, new) size in bytes."""
    before = path.stat().st_size
    with Image.open(path) as image:
        small = image.convert("RGB").quantize(COLOURS, method=Image.Quantize.MEDIANCUT)
    small.save(path, "PNG", optimize=True)
    return before, path.stat().st_size


def main(argv: list[str]) -> int:
    """Shrink each PNG named in `argv`."""
    for name in argv:
        before, after = shrink(Path(name))
        print(f"{name}: {before:,} -> {after:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
