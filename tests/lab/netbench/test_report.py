"""The report from a made-up results file: the paper-shaped tables, the stated ratios, bound checks, plots."""

from __future__ import annotations

from pathlib import Path

from shadowtutor_lab.netbench.report import reference_bandwidths, render_markdown, write_report
from shadowtutor_lab.netbench.results import Results, ServerWork
from tests.lab.netbench.test_analysis import shadow_run

SCENES = ("fixed-people", "moving-street")


def made_up_results() -> Results:
    """ShadowTutor at 10 FPS on 80 Mbps and 8 FPS on 8; naive raw 40 -> 4 FPS, naive JPEG 60 -> 30 FPS."""
    results = Results(
        meta={"command": "shadowtutor bench network --scenes a b", "created": "2026-11-22T00:00:00+00:00",
              "machine": {"cpu_model": "Test CPU", "cpu_count": 2}, "process_env": {"OMP_NUM_THREADS": "1"},
              "algorithm_params": {"min_stride": 8, "max_stride": 64, "max_updates": 8},
              "variants": {"shadowtutor": {"mode": "distill", "edge_args": []}},
              "link": {"tbf_latency_ms": 100.0}},
        scenes={name: {"camera": name.split("-")[0], "preset": name, "frames": 100, "width": 320, "height": 180}
                for name in SCENES},
        links=[{"mbps": 80.0, "bytes": 10, "up_mbps": 76.0, "down_mbps": 76.1},
               {"mbps": 8.0, "bytes": 1, "up_mbps": 7.6, "down_mbps": 7.7}],
    )
    naive = dict(key_frames=100, frames_sent=100, update_roundtrip_seconds=[], waited_seconds=0.0,
                 handshake_bytes_received=300, server=ServerWork(0.3, 100, 0.0, 0, 0), miou_percent=100.0)
    for scene in SCENES:
        results.add(shadow_run(scene=scene, bandwidth_mbps=80.0))
        results.add(shadow_run(scene=scene, bandwidth_mbps=8.0, loop_seconds=12.5, miou_percent=65.0))
        for mbps, raw_s, jpeg_s in ((80.0, 2.5, 100 / 60), (8.0, 25.0, 100 / 30)):
            results.add(shadow_run(scene=scene, bandwidth_mbps=mbps, variant="naive-raw", loop_seconds=raw_s,
                                   bytes_sent=17_300_000, bytes_received=200_300, **naive))
            results.add(shadow_run(scene=scene, bandwidth_mbps=mbps, variant="naive-jpeg", loop_seconds=jpeg_s,
                                   bytes_sent=2_700_000, bytes_received=200_300, **naive))
    return results


def test_the_page_has_the_papers_tables_and_states_both_ratios() -> None:
    text = render_markdown(made_up_results(), {"fps": "fps.png", "bytes": "bytes.png"}, "A note.", "REGEN")
    for heading in ("## Throughput at 80 Mbps (paper Table 3)", "## Data per key frame at 80 Mbps (paper Table 4)",
                    "## Key frames and traffic at 80 Mbps (paper Table 5)", "## Bandwidth sweep (paper Figure 4)",
                    "## Table 1 components and the analytic bounds", "## Notes"):
        assert heading in text
    assert "| fixed | fixed-people | 10.00 (10.0) | 60.00 (1.7) | 40.00 (2.5) |" in text
    assert ("**At 8 Mbps ShadowTutor keeps 80 % of its 80 Mbps throughput; naive offloading with raw frames "
            "keeps 10 %**") in text
    assert "| to server | 0.1000 | 0.0270 | 0.1730 |" in text  # MB per key frame
    assert "Within the bounds: FPS in 4 of 4 runs, Mbps in 4 of 4 runs." in text
    assert "![FPS against bandwidth](fps.png)" in text and "REGEN" in text and "A note." in text
    assert "- ShadowTutor sends 37.9 % more bytes per frame than naive (JPEG)" in text  # 40 kB vs 29 kB
    assert "- ShadowTutor sends 77.1 % fewer bytes per frame than naive (raw)" in text  # 40 kB vs 175 kB
    assert "not a Jetson" in text and "as fast as it can" in text
    assert "- Machine: Test CPU, 2 cores. Server and edge" in text  # no load recorded: nothing said of it


def test_the_setup_names_the_load_the_run_recorded() -> None:
    results = made_up_results()
    results.meta["load_average_at_end"] = [5.25, 4.0, 3.125]
    text = render_markdown(results, {"fps": "fps.png", "bytes": "bytes.png"})
    assert "2 cores (load average at the end of the run: 5.25 / 4.00 / 3.12 over 1 / 5 / 15 min)." in text


def test_the_page_says_whose_labels_the_teacher_reads() -> None:
    results = made_up_results()
    generated = render_markdown(results, {"fps": "fps.png", "bytes": "bytes.png"})
    assert "the teacher is each scene's ground truth (the `labels` teacher" in generated
    results.scenes["fixed-people"]["preset"] = "real:vtest"
    mixed = render_markdown(results, {"fps": "fps.png", "bytes": "bytes.png"})
    assert "each generated scene's ground truth, or the labels a real teacher made of each real clip" in mixed
    results.scenes["moving-street"]["preset"] = "real:bikes"
    real = render_markdown(results, {"fps": "fps.png", "bytes": "bytes.png"})
    assert "against the teacher (here the labels a real teacher made of each real clip beforehand" in real
    assert "ground truth" not in real


def test_a_bound_miss_is_listed_with_its_size() -> None:
    results = made_up_results()
    results.add(shadow_run(scene="fixed-people", bandwidth_mbps=8.0, loop_seconds=40.0, waited_seconds=32.0))
    text = render_markdown(results, {"fps": "f.png", "bytes": "b.png"})
    assert "FPS in 3 of 4 runs" in text
    assert "- fixed-people at 8 Mbps: FPS 2.50 outside [4.47, 12.50] (-44.1 %)" in text


def test_reference_bandwidths_fall_back_to_the_sweeps_ends() -> None:
    results = made_up_results()
    assert reference_bandwidths(results) == (80.0, 8.0)
    results.runs = [r for r in results.runs if r.bandwidth_mbps != 80.0]
    results.add(shadow_run(bandwidth_mbps=50.0, scene="fixed-people"))
    assert reference_bandwidths(results) == (50.0, 8.0)


def test_write_report_draws_both_plots_and_links_them_relative_to_the_page(tmp_path: Path) -> None:
    out = write_report(made_up_results(), tmp_path / "docs" / "results.md", tmp_path / "docs" / "results" / "net")
    text = out.read_text()
    for name in ("fps_vs_bandwidth.png", "bytes_per_frame.png"):
        png = tmp_path / "docs" / "results" / "net" / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"](results/net/{name})" in text


def test_the_link_check_says_how_many_rounds_its_best_figures_come_from() -> None:
    results = made_up_results()
    single = render_markdown(results, {"fps": "f.png", "bytes": "b.png"}, "", "REGEN")
    assert "between the namespaces (goodput" in single  # results from before the probe took rounds
    for link in results.links:
        link["rounds"] = 3
    text = render_markdown(results, {"fps": "f.png", "bytes": "b.png"}, "", "REGEN")
    assert "between the namespaces, the best of 3 rounds (goodput" in text


def test_the_page_compares_shadowtutor_with_h264_offloading_in_kbps_per_camera() -> None:
    results = made_up_results()
    naive = dict(key_frames=100, frames_sent=100, update_roundtrip_seconds=[], waited_seconds=0.0,
                 handshake_bytes_received=300, server=ServerWork(0.3, 100, 0.0, 0, 0), miou_percent=100.0)
    for scene in SCENES:
        results.scenes[scene]["fps"] = 10.0
        results.add(shadow_run(scene=scene, bandwidth_mbps=80.0, variant="naive-h264", loop_seconds=2.0,
                               bytes_sent=500_200, bytes_received=200_300, **naive))
    text = render_markdown(results, {"fps": "fps.png", "bytes": "bytes.png"}, "", "REGEN")
    assert "### Against naive (H.264 stream) at 80 Mbps" in text
    # ShadowTutor: 10 kB up and 30 kB down per frame; H.264 offloading 5 kB up, 2 kB down; at 10 FPS
    assert "| fixed-people | 800.0 | 2400.0 | 400.0 | 160.0 | 0.50x | 0.07x | 0.17x |" in text
