"""The sweep: real ``shadowtutor serve`` and ``shadowtutor edge`` processes over the shaped link.

One server per scene (its teacher is the scene's ground truth) runs in the server namespace for
the whole sweep. For each bandwidth the link is reshaped and checked with a timed transfer;
then, for each scene and variant, an edge agent in the edge namespace processes the scene's
video as fast as it can (no ``--max-fps``: the paper's throughput is frames per second of
processing, not of a camera). After each run the record goes to ``results.json`` at once, so an
interrupted sweep keeps what it finished (``resume`` skips those runs next time).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.scene_store import VIDEO_NAME, Scene
from shadowtutor_lab.demo.processes import (
    ManagedProcess,
    ProcessFailed,
    follow_agent,
    half_cores_env,
    shadowtutor_command,
    start_process,
)
from shadowtutor_lab.demo.report import mean_miou_against_teacher
from shadowtutor_lab.netbench.analysis import run_metrics
from shadowtutor_lab.netbench.netns import (
    EDGE_ADDR,
    PREFIX_LEN,
    SERVER_ADDR,
    NamespaceLink,
    check_requirements,
    exec_in,
    remove_stale,
    signals_raise_exit,
)
from shadowtutor_lab.netbench.probe import http_get, measure_link
from shadowtutor_lab.netbench.results import RESULTS_JSON, Results, RunRecord, ServerWork
from shadowtutor_lab.netbench.shaping import (
    BURST_SECONDS,
    MIN_BURST_BYTES,
    PAPER_BANDWIDTHS_MBPS,
    LinkShape,
    apply_shape,
    describe_shaping,
)
from shadowtutor_lab.netbench.variants import Variant, build_variants

BASE_PORT = 8000


@dataclass(frozen=True)
class NetworkBenchConfig:
    scenes: tuple[Path, ...]
    out_dir: Path  # results.json
    work_dir: Path  # per-run label maps, summaries and logs
    bandwidths: tuple[float, ...] = PAPER_BANDWIDTHS_MBPS
    frames: int | None = None  # first N frames of each scene (default: all)
    size: tuple[int, int] | None = None  # the agent's --resize
    variants: tuple[Variant, ...] = field(default_factory=build_variants)
    student: Path | None = None  # the server's --student (default: its packaged pre-trained one)
    latency_ms: float = 100.0
    delay_ms: float = 0.0
    resume: bool = False
    command: str = ""
    change_based: bool = False  # ShadowTutor edges label change-based (--change-based)
    ready_timeout: float = 180.0
    run_timeout: float = 900.0

    def __post_init__(self) -> None:
        if not self.scenes:
            raise ValueError("give at least one scene directory")
        if not self.bandwidths or min(self.bandwidths) <= 0:
            raise ValueError(f"bandwidths must be positive Mbps, got {list(self.bandwidths)}")
        names = [p.name for p in self.scenes]
        if len(set(names)) != len(names):
            raise ValueError(f"scene directories must have distinct names (they name the results): {names}")


def agent_codec_defaults() -> dict[str, object]:
    """The edge agent's default codec settings (what ShadowTutor's runs use unless a variant overrides them)."""
    from edge_agent.settings import EdgeSettings
    from shadowtutor.protocol.defaults import DEFAULT_FRAME_QUALITY

    values = {
        name: f.get_default(call_default_factory=True)
        for name, f in EdgeSettings.model_fields.items() if "codec" in name or "quality" in name
    }
    if values.get("frame_quality") is None:  # None: each lossy codec's default quality
        values["frame_quality"] = dict(DEFAULT_FRAME_QUALITY)
    return {name: list(v) if isinstance(v, tuple) else v for name, v in values.items()}  # as JSON has them


def source_revision() -> str:
    """The git commit of the code that ran, ``+dirty`` when tracked files differ from it (or ``unknown``)."""
    where = str(Path(__file__).resolve().parent)
    try:
        head = subprocess.run(["git", "-C", where, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "-C", where, "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("+dirty" if status.stdout.strip() else "")


def server_work_from_metrics(text: str) -> ServerWork:
    """The counters of the server's ``/metrics`` that the Table 1 components come from."""
    values = {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}
    prefix = "shadowtutor_server_"
    try:
        return ServerWork(
            teacher_seconds=values[f"{prefix}teacher_latency_seconds_sum"],
            teacher_count=int(values[f"{prefix}teacher_latency_seconds_count"]),
            distill_seconds=values[f"{prefix}distill_latency_seconds_sum"],
            distill_count=int(values[f"{prefix}distill_latency_seconds_count"]),
            steps=int(values[f"{prefix}distill_steps_total"]),
        )
    except KeyError as exc:
        raise RuntimeError(f"the server's /metrics lacks {exc.args[0]}") from None


@dataclass
class SceneServer:
    name: str
    scene: Scene
    port: int
    process: ManagedProcess
    namespace: str

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def work(self) -> ServerWork:
        body = http_get(self.namespace, self.url("/metrics"))
        if body is None:
            raise ProcessFailed(f"the server of {self.name} does not answer /metrics: {self.process.describe()}")
        return server_work_from_metrics(body.decode())

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while http_get(self.namespace, self.url("/readyz")) is None:
            if not self.process.alive() or time.monotonic() > deadline:
                raise ProcessFailed(f"the server of {self.name} never became ready: {self.process.describe()}")
            time.sleep(0.25)


class NetworkBench:
    def __init__(self, config: NetworkBenchConfig) -> None:
        self.config = config
        self.scenes: dict[str, Scene] = {}
        self.results_path = config.out_dir / RESULTS_JSON

    def run(self) -> Results:
        check_requirements()
        self.scenes = {path.name: Scene.open(path) for path in self.config.scenes}
        removed = remove_stale()
        if removed:
            print(f"removed namespaces left by an earlier run: {', '.join(removed)}")
        results = Results.load(self.results_path) if self.config.resume and self.results_path.is_file() else Results()
        results.meta = self._meta()
        results.scenes.update({name: self._scene_info(scene) for name, scene in self.scenes.items()})
        with signals_raise_exit(), NamespaceLink() as link, ExitStack() as stack:
            servers = [stack.enter_context(self._server(link, name, scene, BASE_PORT + i))
                       for i, (name, scene) in enumerate(self.scenes.items())]
            for server in servers:
                server.wait_ready(self.config.ready_timeout)
            for mbps in self.config.bandwidths:
                self._shape(link, mbps, results)
                for server in servers:
                    for variant in self.config.variants:
                        if self.config.resume and results.has(server.name, mbps, variant.name):
                            continue
                        record = self._run_agent(link, server, mbps, variant)
                        results.add(record)
                        results.save(self.results_path)
                        print(_one_line(record))
        results.meta["load_average_at_end"] = [round(v, 2) for v in os.getloadavg()]  # others' work shows here
        results.save(self.results_path)
        return results

    # -- pieces --------------------------------------------------------------------------------

    def _shape(self, link: NamespaceLink, mbps: float, results: Results) -> None:
        """Shape the link to ``mbps`` and check it with a timed transfer (recorded in the results)."""
        apply_shape(link, LinkShape(mbps, self.config.latency_ms, self.config.delay_ms))
        check = measure_link(link.server.namespace, link.server.address, link.edge.namespace, mbps)
        print(f"link at {mbps:g} Mbps: TCP goodput {check.up_mbps:.2f} Mbps up, {check.down_mbps:.2f} Mbps down")
        results.links = [c for c in results.links if c["mbps"] != mbps] + [check.to_dict()]
        results.meta["tc_qdisc"] = describe_shaping(link)

    def _frames(self, scene: Scene) -> int:
        return len(scene) if self.config.frames is None else min(self.config.frames, len(scene))

    def _scene_info(self, scene: Scene) -> dict[str, object]:
        m = scene.meta
        width, height = self.config.size or m.size
        return {"directory": str(scene.directory), "preset": m.preset, "seed": m.seed, "camera": m.camera,
                "category": m.category, "frames": self._frames(scene), "width": width, "height": height,
                "fps": m.fps, "cuts": list(m.cuts)}

    def _meta(self) -> dict[str, object]:
        from services.server.teaching.loading import default_student_path
        from shadowtutor_lab.evaluation.machine import machine_info

        c = self.config
        return {
            "command": c.command,
            "source_revision": source_revision(),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": machine_info(),
            "process_env": half_cores_env(),
            "as_fast_as_possible": True,  # the agent ran without --max-fps
            "bandwidths_mbps": list(c.bandwidths),
            "link": {
                "server_addr": f"{SERVER_ADDR}/{PREFIX_LEN}", "edge_addr": f"{EDGE_ADDR}/{PREFIX_LEN}",
                "tbf_latency_ms": c.latency_ms, "netem_delay_ms": c.delay_ms,
                "tbf_burst": f"max({MIN_BURST_BYTES} B, {BURST_SECONDS * 1000:g} ms of the rate)",
            },
            "algorithm_params": AlgorithmParams().to_dict(),
            "student": str(c.student or default_student_path() or "none: a freshly initialised student"),
            "variants": {v.name: v.to_dict() for v in c.variants},
            "agent_codec_defaults": agent_codec_defaults(),
            "frames": c.frames,
            "size": list(c.size) if c.size else None,
        }

    @contextmanager
    def _server(self, link: NamespaceLink, name: str, scene: Scene, port: int) -> Iterator[SceneServer]:
        log_dir = self.config.work_dir / name
        command = shadowtutor_command(
            "serve", "--host", "0.0.0.0", "--port", str(port), "--device", "cpu", "--log-level", "warning",
            "--teacher", "labels", "--labels-dir", str(scene.directory),
            *(("--student", str(self.config.student)) if self.config.student else ()),
        )
        process = start_process(exec_in(link.server.namespace, command), name="server", log_dir=log_dir,
                                env=half_cores_env())
        with process:
            yield SceneServer(name, scene, port, process, link.server.namespace)

    def _run_agent(self, link: NamespaceLink, server: SceneServer, mbps: float, variant: Variant) -> RunRecord:
        c = self.config
        run_dir = c.work_dir / server.name / f"{mbps:g}mbps" / variant.name
        shutil.rmtree(run_dir, ignore_errors=True)
        frames = self._frames(server.scene)
        args = [
            "edge", "--server", f"ws://{link.server.address}:{server.port}/v1/edge",
            "--source", str(server.scene.directory / VIDEO_NAME), "--mode", variant.mode,
            "--edge-id", f"{server.name}-{variant.name}", "--output-dir", str(run_dir), "--save-labels",
            "--no-overlay", "--metrics-port", "0", "--max-frames", str(frames), *variant.edge_args,
            # every run starts from the server's WELCOME, as in the paper: no state, time for a slow link
            "--state-dir", "", "--startup-timeout", "120",
        ]
        if c.change_based and variant.mode == "distill":
            args.append("--change-based")
        if c.size is not None:
            args += ["--resize", f"{c.size[0]}x{c.size[1]}"]
        work_before, wire_before = server.work(), link.byte_counters(link.edge)
        agent = start_process(exec_in(link.edge.namespace, shadowtutor_command(*args)), name="edge",
                              log_dir=run_dir, env=half_cores_env())
        try:
            follow_agent(agent, run_dir / "labels", frames, f"{server.name} {mbps:g} Mbps {variant.name}",
                         c.run_timeout)
        finally:
            agent.stop()
        wire_after, work = link.byte_counters(link.edge), server.work().minus(work_before)
        summary = json.loads((run_dir / "summary.json").read_text())
        if summary["labelled_frames"] != summary["frames"] or summary["frames"] != frames:
            raise ProcessFailed(
                f"{server.name} at {mbps:g} Mbps ({variant.name}): {summary['labelled_frames']} of "
                f"{summary['frames']} frames labelled, {frames} expected; see {run_dir / 'edge.log'}"
            )
        return RunRecord(
            scene=server.name, bandwidth_mbps=mbps, variant=variant.name,
            frames=summary["frames"], labelled_frames=summary["labelled_frames"],
            key_frames=summary["key_frames"], frames_sent=summary["frames_sent"],
            loop_seconds=summary["loop_seconds"], wall_seconds=summary["wall_seconds"],
            waited_seconds=summary["waited_seconds"],
            bytes_sent=summary["bytes_sent"], bytes_received=summary["bytes_received"],
            handshake_bytes_sent=summary["first_handshake_bytes_sent"],
            handshake_bytes_received=summary["first_handshake_bytes_received"],
            wire_bytes_up=wire_after[0] - wire_before[0], wire_bytes_down=wire_after[1] - wire_before[1],
            updates_applied=summary["updates_applied"],
            miou_percent=mean_miou_against_teacher(run_dir / "labels", server.scene, frames, c.size),
            update_roundtrip_seconds=summary["update_roundtrip_seconds"],
            server=work,
        )


def _one_line(r: RunRecord) -> str:
    m = run_metrics(r, AlgorithmParams())
    return (f"  {r.scene} {r.bandwidth_mbps:g} Mbps {r.variant}: {m.fps:.1f} FPS, {m.mbps:.2f} Mbps, "
            f"{100 * m.key_frame_ratio:.1f} % key frames, mIoU {r.miou_percent:.1f}")


def run_network_bench(config: NetworkBenchConfig) -> Results:
    return NetworkBench(config).run()
