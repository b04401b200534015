"""docs/results.md is what its own regenerate command makes from the committed results file."""

from __future__ import annotations

import shlex
from pathlib import Path

from shadowtutor_lab.netbench.report import BYTES_PLOT, FPS_PLOT, render_markdown
from shadowtutor_lab.netbench.results import Results

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "results.md"
RESULTS = ROOT / "docs" / "results" / "network" / "results.json"


def test_the_committed_page_matches_its_results_file() -> None:
    regenerate = shlex.join(["shadowtutor", "bench", "network-report", "--results", "docs/results/network/results.json",
                             "--out", "docs/results.md", "--plots-dir", "docs/results/network"])
    page = PAGE.read_text()
    assert regenerate in page, "the page names another command than the one this test replays"
    plots = {"fps": f"results/network/{FPS_PLOT}", "bytes": f"results/network/{BYTES_PLOT}"}
    notes = (RESULTS.parent / "notes.md").read_text()
    expected = render_markdown(Results.load(RESULTS), plots, notes, regenerate)
    assert page == expected, f"docs/results.md is stale: run `{regenerate}`"
    for plot in plots.values():
        assert (PAGE.parent / plot).is_file()


def test_the_committed_run_covers_three_scenes_and_the_papers_sweep() -> None:
    results = Results.load(RESULTS)
    runs = results.runs
    assert len({run.scene for run in runs}) >= 3
    assert {run.bandwidth_mbps for run in runs} >= {90, 80, 60, 40, 20, 12, 8}
    assert {run.variant for run in runs} == {"shadowtutor", "naive-h264", "naive-jpeg", "naive-raw"}
