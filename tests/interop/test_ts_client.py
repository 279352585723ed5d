"""The official TypeScript SDK client (npm @modelcontextprotocol/sdk, driven
through ts_client.mjs) in front of joch, with the reference server
(@modelcontextprotocol/server-everything) behind it: a tool with an
outputSchema, resources and prompts under the server's prefix, and the
violations an invalid-arguments refusal lists."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from conftest import NAMESPACE, stdio_everything
from test_conformance import node_modules

HERE = Path(__file__).parent


def ts_client(tmp_path: Path, url: str, *steps: str, samples: bool = False) -> dict:
    """Runs the steps with the TypeScript client; what each answered."""
    if not (tmp_path / "node_modules").exists():
        (tmp_path / "node_modules").symlink_to(node_modules())
    script = tmp_path / "ts_client.mjs"
    shutil.copy(HERE / "ts_client.mjs", script)
    env = {**os.environ, **({"TS_CLIENT_SAMPLES": "1"} if samples else {})}
    done = subprocess.run(["node", str(script), url, *steps], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_typescript_client_sees_structured_content_resources_prompts_and_violations(joch, tmp_path):
    joch.apply(stdio_everything())
    doc = "everything.demo://resource/static/document/features.md"
    report = ts_client(
        tmp_path,
        joch.mcp_url(),
        'call:everything.get-structured-content:{"location":"New York"}',
        'call:everything.get-sum:{"a":"x"}',
        "resources",
        "templates",
        f"read:{doc}",
        "prompts",
        'prompt:everything.args-prompt:{"city":"Paris"}',
    )
    structured = report['call:everything.get-structured-content:{"location":"New York"}']
    assert structured.get("isError") is not True, structured
    assert set(structured["structuredContent"]) == {"temperature", "conditions", "humidity"}, structured

    refused = report['call:everything.get-sum:{"a":"x"}']
    assert refused["isError"] is True, refused
    reason = json.loads(refused["content"][0]["text"])
    assert "fix these arguments" in reason["reason"], reason
    paths = {v["path"] for v in reason["violations"]}
    assert "/a" in paths, reason

    uris = [r["uri"] for r in report["resources"]["resources"]]
    assert doc in uris, uris
    templates = [t["uriTemplate"] for t in report["templates"]["resourceTemplates"]]
    assert "everything.demo://resource/dynamic/text/{resourceId}" in templates, templates
    read = report[f"read:{doc}"]
    assert read["contents"][0]["uri"] == doc, read
    assert read["contents"][0]["text"].startswith("# Everything Server - Features"), read

    prompts = [p["name"] for p in report["prompts"]["prompts"]]
    assert "everything.args-prompt" in prompts, prompts
    prompt = report['prompt:everything.args-prompt:{"city":"Paris"}']
    assert prompt["messages"][0]["content"]["text"] == "What's weather in Paris?", prompt

    # Both the read and the get are calls in the ledger.
    operations = {c["spec"].get("operation"): c["status"]["phase"] for c in joch.calls()}
    assert operations.get("resources/read") == "Succeeded", operations
    assert operations.get("prompts/get") == "Succeeded", operations


def test_the_stdio_proxy_relays_resources_and_prompts_too(joch, tmp_path):
    joch.apply(stdio_everything())
    doc = "everything.demo://resource/static/document/features.md"
    proxy = f"stdio:{joch.bin} mcp --server {joch.base} --namespace {NAMESPACE}"
    report = ts_client(tmp_path, proxy, "resources", f"read:{doc}", "prompts", "prompt:everything.simple-prompt:{}")
    assert doc in [r["uri"] for r in report["resources"]["resources"]], report["resources"]
    assert report[f"read:{doc}"]["contents"][0]["uri"] == doc, report[f"read:{doc}"]
    assert "everything.simple-prompt" in [p["name"] for p in report["prompts"]["prompts"]], report["prompts"]
    assert report["prompt:everything.simple-prompt:{}"]["messages"], report


def test_an_upstreams_sampling_request_reaches_the_client_behind_the_stdio_proxy(joch, tmp_path):
    joch.apply(stdio_everything())
    proxy = f"stdio:{joch.bin} mcp --server {joch.base} --namespace {NAMESPACE}"
    step = 'call:everything.trigger-sampling-request:{"prompt":"say hi"}'
    sampled = ts_client(tmp_path, proxy, step, samples=True)[step]
    assert sampled.get("isError") is not True, sampled
    assert "sampled by the TypeScript client" in json.dumps(sampled), sampled
    # A client that did not declare sampling is never asked: the upstream gets an error.
    refused = ts_client(tmp_path, proxy, step)[step]
    assert refused.get("isError") is True and "sampled by" not in json.dumps(refused), refused
    phases = sorted(c["status"]["phase"] for c in joch.calls(tool="everything.trigger-sampling-request"))
    assert phases == ["Failed", "Succeeded"], phases
