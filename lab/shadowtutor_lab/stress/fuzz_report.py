"""The fuzz run's report: ``PREFIX.json`` (everything) and ``PREFIX.md`` (for people)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MAX_LISTED_VIOLATIONS = 50


def summary_lines(results: dict[str, Any]) -> list[str]:
    """A few lines for the terminal: cases, violations, canary."""
    canary = results["canary"]
    lines = [
        f"fuzz: {results['cases']} cases in {results['seconds']:.0f} s (seed {results['seed']}, "
        f"{len(results['categories'])} categories) against {results['server']['url']} "
        f"(version {results['server']['version']})",
        "canary: off" if canary is None else
        f"canary: {canary['round_trips']} key-frame round trips in {canary['sessions']} session(s), "
        f"slowest {canary['worst_seconds']:.2f} s",
        f"violations: {len(results['violations'])}" + ("" if results["violations"] else " (passed)"),
    ]
    attacks = (results.get("attacks") or {}).get("results") or []
    if attacks:
        lines.insert(-1, "attacks: " + ", ".join(f"{a['name']} {'held' if a['passed'] else 'FAILED'}"
                                                 for a in attacks))
    lines += [f"  - {_where(v)}{v['what']}" for v in results["violations"][:10]]
    return lines


def _where(violation: dict[str, Any]) -> str:
    if violation.get("case") is None:
        return ""
    return f"case {violation['case']} {violation['category']} ({violation['variant']}): "


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(results: dict[str, Any]) -> str:
    server, machine, canary = results["server"], results["machine"], results["canary"]
    verdict = "**passed**: no violations" if results["passed"] else f"**{len(results['violations'])} violations**"
    lines = [
        "# Fuzzing a live server",
        "",
        f"{results['cases']} cases in {results['seconds']:.0f} s, seed {results['seed']}: {verdict}.",
        "",
        f"- Command: `{results['command']}`",
        f"- Started: {results['started_at']}",
        f"- Server: {'a local `shadowtutor serve` (labels teacher, generated scene)' if server['local'] else 'given'}"
        f" at {server['url']}, version {server['version']}, max message {server['max_message_bytes']} bytes"
        + (f"; flags `{' '.join(server['serve_args'])}`" if server["serve_args"] else ""),
        f"- Machine: {machine.get('cpu_model')} ({machine.get('cpu_count')} CPUs), Python {machine.get('python')},"
        f" load average after {', '.join(f'{x:.1f}' for x in machine['load_average_after'])}",
        "- Canary: " + ("off (tokens without canary credentials)" if canary is None else
                        f"{canary['round_trips']} key-frame round trips in {canary['sessions']} session(s) during "
                        f"the run, slowest {canary['worst_seconds']:.2f} s, {len(canary['failures'])} failures"),
        "",
        "Each case opens a WebSocket (with a valid HELLO first when it is about a session), sends, and must",
        "get, within the case timeout, a typed ERROR and/or a close with the documented close code, or (valid",
        "input, non-fatal errors) the session must go on: a probe after the case (a RESYNC_REQUEST) must be",
        "answered. After every case `GET /healthz` must answer; a canary edge does key-frame round trips all",
        "along; at the end the server must be down to zero sessions and its log free of tracebacks.",
        "",
        "## Per category",
        "",
        "| Category | Cases | Variants | Mean s | Outcomes | Violations |",
        "| --- | ---: | ---: | ---: | --- | ---: |",
    ]
    for name, cat in results["categories"].items():
        outcomes = ", ".join(f"{_cell(k)}: {n}" for k, n in cat["outcomes"].items())
        lines.append(f"| {name} | {cat['cases']} | {cat['variants']} | {cat['mean_seconds']:.3f} | {outcomes} | "
                     f"{cat['violations']} |")
    lines += _attack_lines(results.get("attacks"))
    lines += ["", "## Violations", ""]
    if not results["violations"]:
        lines.append("None.")
    for violation in results["violations"][:MAX_LISTED_VIOLATIONS]:
        lines.append(f"- {_cell(_where(violation) + violation['what'])}")
    if len(results["violations"]) > MAX_LISTED_VIOLATIONS:
        lines.append(f"- ... and {len(results['violations']) - MAX_LISTED_VIOLATIONS} more (see the JSON)")
    lines += ["", "Outcome keys: `close CODE ERROR` (the close code and the fatal ERROR before it), `answered",
              "(ERRORS)` (the session went on; non-fatal ERRORs on the way), `dropped` (the fuzzer cut the",
              "connection).", ""]
    return "\n".join(lines)


def _attack_lines(attacks: dict[str, Any] | None) -> list[str]:
    """The attacks' table (docs/security.md says what each must hold); nothing when none ran."""
    if not attacks or not attacks["results"]:
        return []
    lines = ["", f"## Attacks ({attacks['scale']} form)", "",
             "| Attack | Held | Seconds | Figures |", "| --- | --- | ---: | --- |"]
    for attack in attacks["results"]:
        held = "yes" if attack["passed"] else "**no**: " + "; ".join(attack["failures"])
        figures = json.dumps(attack["figures"], separators=(", ", ": "))
        lines.append(f"| {attack['name']} | {_cell(held)} | {attack['seconds']:.1f} | `{_cell(figures)}` |")
    return lines


def write_report(results: dict[str, Any], prefix: Path) -> tuple[Path, Path]:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    json_path, md_path = prefix.with_name(prefix.name + ".json"), prefix.with_name(prefix.name + ".md")
    json_path.write_text(json.dumps(results, indent=1, default=str) + "\n")
    md_path.write_text(markdown(results))
    return json_path, md_path
