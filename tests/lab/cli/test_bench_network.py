"""``shadowtutor bench network`` / ``network-report``: arguments, the refusal without root, the report command."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from shadowtutor_cli import build_parser, main
from shadowtutor_lab.cli.bench_network import bandwidth_list
from shadowtutor_lab.demo.processes import shadowtutor_command
from tests.lab.netbench.test_report import made_up_results

NOBODY = 65534


def test_bandwidth_lists() -> None:
    assert bandwidth_list("90,80,8") == (90.0, 80.0, 8.0)
    assert bandwidth_list("12.5") == (12.5,)
    for bad in ("", "8,x", "8,0", "-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            bandwidth_list(bad)


def test_defaults_are_the_papers_sweep_and_all_variants() -> None:
    args = build_parser().parse_args(["bench", "network", "--scenes", "a", "b"])
    assert args.bandwidths == (90.0, 80.0, 60.0, 40.0, 20.0, 12.0, 8.0)
    assert args.variants == "shadowtutor,naive-h264,naive-jpeg,naive-raw" and args.delay_ms == 0.0


def _unprivileged(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    if shutil.which("setpriv") is None:
        pytest.skip("running as root and setpriv (util-linux) is absent: cannot run the command unprivileged")
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *command]


def test_without_root_it_says_so_and_exits_non_zero(tmp_path: Path) -> None:
    command = _unprivileged(shadowtutor_command("bench", "network", "--scenes", str(tmp_path / "scene")))
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd="/")
    assert done.returncode != 0
    assert "needs root" in done.stderr, done.stderr


def test_network_report_regenerates_the_page_from_a_results_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results_path = tmp_path / "docs" / "results" / "network" / "results.json"
    made_up_results().save(results_path)
    (results_path.parent / "notes.md").write_text("Why the misses happened.")
    out = tmp_path / "docs" / "results.md"
    assert main(["bench", "network-report", "--results", str(results_path), "--out", str(out)]) == 0
    text = out.read_text()
    assert "paper Table 3" in text and "Why the misses happened." in text
    assert f"shadowtutor bench network-report --results {results_path} --out {out}" in text
    assert (results_path.parent / "fps_vs_bandwidth.png").is_file()
    assert f"wrote {out}" in capsys.readouterr().out


def test_network_report_errors_are_clear(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "network-report", "--results", str(tmp_path / "none.json")]) == 2
    assert "no results file" in capsys.readouterr().err
    made_up_results().save(tmp_path / "results.json")
    code = main(["bench", "network-report", "--results", str(tmp_path / "results.json"),
                 "--out", str(tmp_path / "r.md"), "--notes", str(tmp_path / "absent.md")])
    assert code == 2 and "no notes file" in capsys.readouterr().err
