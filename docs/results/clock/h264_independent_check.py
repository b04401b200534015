"""Independent check of the H.264 offloading baseline: the same frames through the ffmpeg CLI."""
import json, subprocess, sys, os
from pathlib import Path
from shadowtutor.scene_store import Scene
from shadowtutor_lab.demo.h264_baseline import h264_stream_bytes
from shadowtutor.protocol.video_stream import StreamEncoder

out = {}
for scene_dir in sys.argv[1:]:
    scene = Scene.open(scene_dir)
    w, h, fps = scene.meta.width & ~1, scene.meta.height & ~1, scene.meta.fps
    raw = Path("/work/runs_clock/ffcheck/frames.bgr")
    frames = [f[:h, :w] for f in scene.frames()]
    with raw.open("wb") as fh:
        for f in frames:
            fh.write(f.tobytes())
    def ff(rate, src_every=1):
        data = raw
        if src_every > 1:
            data = Path("/work/runs_clock/ffcheck/every.bgr")
            with data.open("wb") as fh:
                for f in frames[::src_every]:
                    fh.write(f.tobytes())
        cmd = ["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "bgr24", "-s", f"{w}x{h}",
               "-framerate", str(rate), "-i", str(data), "-c:v", "libx264", "-preset", "veryfast",
               "-tune", "zerolatency", "-crf", "23", "-pix_fmt", "yuv420p", "-f", "h264",
               "/work/runs_clock/ffcheck/out.264"]
        subprocess.run(cmd, check=True)
        return os.path.getsize("/work/runs_clock/ffcheck/out.264"), " ".join(cmd)
    ours = h264_stream_bytes(scene)
    ff_real, cmd_real = ff(f"{fps:g}")
    ff_1000, _ = ff("1000")
    enc = StreamEncoder(w, h, fps=fps)
    every8 = sum(len(enc.encode(f, i).payload) for i, f in enumerate(frames) if i % 8 == 0)
    ff_every8, cmd8 = ff(f"{fps:g}", 8)
    out[scene_dir] = {
        "frames": len(frames), "size": [w, h], "fps": fps,
        "ours_every_frame_bytes": ours, "ffmpeg_every_frame_bytes_real_rate": ff_real,
        "ffmpeg_every_frame_bytes_1000fps": ff_1000, "ffmpeg_command": cmd_real,
        "ours_every_8th_frame_bytes": every8, "ffmpeg_every_8th_frame_bytes_at_source_rate": ff_every8,
        "ffmpeg_command_every_8th": cmd8,
    }
    print(json.dumps(out[scene_dir], indent=1), flush=True)
Path("/work/runs_clock/ffcheck/check.json").write_text(json.dumps(out, indent=2))
