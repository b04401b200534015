"""What an edge offers by default: codecs in preference order and the quality of lossy frames.

This module imports nothing heavy, so that the command-line tools can read it at start.
"""

from __future__ import annotations

# h264 first: a server that does not know it (older) chooses jpeg.
DEFAULT_FRAME_CODECS = ("h264", "jpeg", "raw")
DEFAULT_WEIGHT_CODECS = ("q8delta+zstd", "f16+zstd", "f32+zstd", "f32")
# Quality (1..100) of the lossy frame codecs when none is given.
DEFAULT_FRAME_QUALITY = {"jpeg": 80, "webp": 80}
