"""progress_bar: off a terminal, whole lines at most every LOG_INTERVAL seconds and a last one at the
end, no carriage return; on a terminal, tqdm's in-place redraws."""

from __future__ import annotations

import io

from shadowtutor.progress import progress_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_a_long_bar_writes_a_few_lines_without_carriage_returns() -> None:
    out = io.StringIO()
    for _ in progress_bar(range(20_000), file=out, desc="frames"):
        pass
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    # The first and the last line (a 20,000-step loop takes well under LOG_INTERVAL seconds).
    assert 1 <= len(lines) <= 3, lines
    assert "20000/20000" in lines[-1] and lines[-1].startswith("frames")


def test_on_a_terminal_the_bar_redraws_in_place() -> None:
    out = _Terminal()
    for _ in progress_bar(range(2_000), file=out, mininterval=0, miniters=1):
        pass
    assert out.getvalue().count("\r") > 100
