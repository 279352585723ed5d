"""The MCP conformance suite's client scenarios that apply to a gateway's
upstream client, with joch as the client under test: for each, the suite
starts the scenario's server and runs conformance/joch_client.py with its
URL, which makes that server an McpServer and does through joch's front
what the suite's own client would do directly (see its header). Each
scenario's checks must pass. The scenarios left out, and why, are in
docs/mcp.md (*Conformance*)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from test_conformance import node_modules

HERE = Path(__file__).parent
# Scenario -> the protocol revision it runs at.
APPLICABLE = {
    "initialize": "2025-11-25",
    "tools_call": "2025-11-25",
    "elicitation-sep1034-client-defaults": "2025-11-25",
    "sse-retry": "2025-11-25",
    "json-schema-2020-12-preservation": "2025-11-25",
    "http-custom-headers": "2026-07-28",
    "http-standard-headers": "2026-07-28",
    "http-invalid-tool-headers": "2026-07-28",
    "sep-2322-client-request-state": "2026-07-28",
    "request-metadata": "2026-07-28",
    "json-schema-ref-no-deref": "2026-07-28",
}
TALLY = re.compile(r"Passed: (\d+)/(\d+), (\d+) failed")


def run_scenario(modules: Path, joch_url: str, scenario: str, revision: str, out: Path) -> tuple[int, int, str]:
    """Checks passed and counted, and the suite's output."""
    driver = f"{sys.executable} {HERE / 'conformance' / 'joch_client.py'}"
    done = subprocess.run(
        [
            str(modules / "node" / "bin" / "node"),
            str(modules / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"),
            "client", "--command", driver, "--scenario", scenario,
            "--spec-version", revision, "--timeout", "60000", "-o", str(out),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "JOCH_URL": joch_url},
    )
    tally = TALLY.search(done.stdout)
    if not tally:
        return 0, 1, done.stdout[-3000:] + done.stderr[-2000:]
    passed, counted, failed = (int(n) for n in tally.groups())
    return (passed if failed == 0 else min(passed, counted - 1)), counted, done.stdout[-3000:]


def test_joch_passes_the_client_scenarios_of_a_gateway(joch, tmp_path):
    modules = node_modules()
    started = time.monotonic()
    results = {
        scenario: run_scenario(modules, joch.base, scenario, revision, tmp_path / scenario)
        for scenario, revision in APPLICABLE.items()
    }
    took = time.monotonic() - started
    passing = sorted(s for s, (passed, counted, _) in results.items() if passed == counted)
    print(
        f"\nconformance client scenarios through joch: {len(passing)} of {len(results)} pass "
        f"({took:.1f} s): "
        + ", ".join(f"{s} {p}/{c}" for s, (p, c, _) in sorted(results.items()))
    )
    failing = {s: out for s, (p, c, out) in results.items() if p != c}
    assert not failing, "\n\n".join(f"== {s}\n{out}" for s, out in failing.items())
