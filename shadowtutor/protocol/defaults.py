"""What an edge offers by default: codecs in preference order and the quality of lossy frames.

This module imports nothing heavy, so that the command-line tools can read it at start.
"""

from __future__ import annotations

# h264 first: a server that does not know it (older) chooses jpeg.
DEFAULT_FRAME_CODECS = ("h264", "jpeg", "raw")
# q4sparse+zstd first: the server sends the student's changed coordinates as int4 deltas against
# what the edge holds, the rounding left for later updates (docs/design/sparse_updates.md); a
# server that does not allow it chooses q8delta+zstd.
DEFAULT_WEIGHT_CODECS = ("q4sparse+zstd", "q8delta+zstd", "f16+zstd", "f32+zstd", "f32")
# Quality (1..100) of the lossy frame codecs when none is given.
DEFAULT_FRAME_QUALITY = {"jpeg": 80, "webp": 80}
