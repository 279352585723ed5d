"""The official MCP conformance suite (npm @modelcontextprotocol/conformance,
every server scenario) against the suite's reference server, once directly
and once through joch: the reference server as an McpServer upstream (with
an empty toolPrefix, so names are as the suite expects), joch's MCP front
as the server under test. Every scenario that passes directly must pass
through joch.

The suite needs Node 22 or later: the npm registry's `node` package
(tests/interop/package.json) provides it. The reference server is not on
npm; conformance/everything-server.mts is its port (see its header)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from conftest import NAMESPACE, free_port

HERE = Path(__file__).parent
SUMMARY = re.compile(r"^([✓✗]) (\S+): (\d+) passed, (\d+) failed", re.M)


def node_modules() -> Path:
    if os.environ.get("NODE_MODULES"):
        return Path(os.environ["NODE_MODULES"])
    # .../node_modules/@modelcontextprotocol/server-everything/dist/index.js
    return Path(os.environ["MCP_EVERYTHING"]).parents[3]


def start_reference_server(tmp_path: Path, modules: Path) -> tuple[subprocess.Popen, str]:
    """The reference server on a free port, from a copy beside a link to
    node_modules (Node resolves its imports from the file's directory)."""
    (tmp_path / "node_modules").symlink_to(modules)
    script = tmp_path / "everything-server.mts"
    script.write_text((HERE / "conformance" / "everything-server.mts").read_text())
    port = free_port()
    process = subprocess.Popen(
        [str(modules / "node" / "bin" / "node"), "--disable-warning=ExperimentalWarning", str(script)],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = process.stdout.readline()
    assert line.startswith("listening"), f"the reference server did not start: {line!r}"
    return process, f"http://127.0.0.1:{port}/mcp"


def run_suite(modules: Path, url: str, out: Path, scenario: str | None = None) -> dict[str, bool]:
    """Every server scenario (or one) against `url`: scenario -> passed."""
    which = ["--scenario", scenario] if scenario else ["--suite", "all"]
    done = subprocess.run(
        [
            str(modules / "node" / "bin" / "node"),
            str(modules / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"),
            "server", "--url", url, *which, "-o", str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if scenario:
        # One scenario prints its checks and a tally, not the suite's table.
        tally = re.search(r"Passed: (\d+)/(\d+), (\d+) failed", done.stdout)
        return {scenario: bool(tally) and tally[1] == tally[2] and tally[3] == "0"}
    results = {name: mark == "✓" and failed == "0" for mark, name, _, failed in SUMMARY.findall(done.stdout)}
    assert results, f"the suite reported nothing:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return results


def test_every_scenario_that_passes_directly_passes_through_joch(joch, tmp_path):
    modules = node_modules()
    reference, url = start_reference_server(tmp_path, modules)
    try:
        direct = run_suite(modules, url, tmp_path / "direct")
        joch.apply({
            "apiVersion": "joch.dev/v1alpha1",
            "kind": "McpServer",
            "metadata": {"name": "everything"},
            "spec": {"http": {"url": url}, "toolPrefix": ""},
        })
        started = time.monotonic()
        through = run_suite(modules, joch.mcp_url(NAMESPACE), tmp_path / "through")
        took = time.monotonic() - started
        # Timing-sensitive scenarios (progress, sampling) have been seen to
        # fail once in about ten runs on a loaded machine: one more try
        # each, and the flake printed, so that it is seen, not hidden.
        for scenario in sorted(s for s, ok in through.items() if not ok and direct.get(s)):
            again = run_suite(modules, joch.mcp_url(NAMESPACE), tmp_path / f"again-{scenario}", scenario)
            print(f"\nconformance: {scenario} failed through joch once; again: {again}")
            through[scenario] = again.get(scenario, False)
    finally:
        reference.kill()
        reference.wait()
    passed_direct = sorted(s for s, ok in direct.items() if ok)
    passed_through = sorted(s for s, ok in through.items() if ok)
    print(
        f"\nconformance: {len(passed_direct)} of {len(direct)} scenarios pass directly, "
        f"{len(passed_through)} of {len(through)} through joch ({took:.1f} s)"
    )
    assert len(direct) >= 30, direct
    missing = sorted(set(passed_direct) - set(passed_through))
    assert not missing, f"pass directly but not through joch: {missing}"
