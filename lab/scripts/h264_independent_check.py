"""Check the H.264 offloading baseline against an independent encoder: the same frames of each scene
through the ffmpeg command line (libx264, CRF 23, veryfast, zerolatency), every frame at the
scene's real rate and at 1000 FPS, and every 8th frame at the source's rate, beside this project's
own figures. Writes the JSON to the path given as ``--out``.

    python lab/scripts/h264_independent_check.py --out docs/results/clock/h264-independent-check.json SCENE...
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from shadowtutor.protocol.video_stream import StreamEncoder
from shadowtutor.scene_store import Scene
from shadowtutor_lab.evaluation.h264_baseline import h264_stream_bytes


def ffmpeg_bytes(frames: list[np.ndarray], rate: str, folder: Path) -> tuple[int, str]:
    """Bytes of ``frames`` encoded by the ffmpeg CLI at ``rate`` frames per second, and the command."""
    height, width = frames[0].shape[:2]
    raw, out = folder / "frames.bgr", folder / "out.264"
    with raw.open("wb") as sink:
        for frame in frames:
            sink.write(frame.tobytes())
    command = ["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "bgr24", "-s", f"{width}x{height}",
               "-framerate", rate, "-i", str(raw), "-c:v", "libx264", "-preset", "veryfast",
               "-tune", "zerolatency", "-crf", "23", "-pix_fmt", "yuv420p", "-f", "h264", str(out)]
    subprocess.run(command, check=True)
    return out.stat().st_size, " ".join(command)


def check(scene_dir: str, folder: Path) -> dict[str, object]:
    scene = Scene.open(scene_dir)
    width, height, fps = scene.meta.width & ~1, scene.meta.height & ~1, scene.meta.fps
    frames = [np.ascontiguousarray(frame[:height, :width]) for frame in scene.frames()]
    real, command = ffmpeg_bytes(frames, f"{fps:g}", folder)
    thousand, _ = ffmpeg_bytes(frames, "1000", folder)
    every8, command8 = ffmpeg_bytes(frames[::8], f"{fps:g}", folder)
    encoder = StreamEncoder(width, height, fps=fps)
    ours8 = sum(len(encoder.encode(frame, index).payload) for index, frame in enumerate(frames) if index % 8 == 0)
    return {
        "frames": len(frames), "size": [width, height], "fps": fps,
        "ours_every_frame_bytes": h264_stream_bytes(scene), "ffmpeg_every_frame_bytes_real_rate": real,
        "ffmpeg_every_frame_bytes_1000fps": thousand, "ffmpeg_command": command,
        "ours_every_8th_frame_bytes": ours8, "ffmpeg_every_8th_frame_bytes_at_source_rate": every8,
        "ffmpeg_command_every_8th": command8,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenes", nargs="+")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for scene_dir in args.scenes:
            results[scene_dir] = check(scene_dir, Path(folder))
            print(json.dumps(results[scene_dir], indent=1), flush=True)
    args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
