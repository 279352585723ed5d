"""joch's container image, as scripts/image builds it, run with buildah: it
starts as its configured unprivileged user, answers /readyz, calls a tool,
and after being killed and started again on the same volume still has the
call. The image is built from the binary under test (JOCH_BIN, the debug
build stripped: a release build does not fit in CI's time); the image's
entrypoint, user and variables are the ones a release image gets."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from conftest import Joch, _drain, _required_env, free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
TAG = f"localhost/joch:interop-{os.getpid()}"
TOKEN = "image-test-admin-token-0123456789"
# buildah runs as root: directly, or through sudo for a CI user that has it.
SUDO = [] if os.geteuid() == 0 else ["sudo", "-n"]
BUILDAH = [*SUDO, "buildah", "--storage-driver", "vfs"]


def buildah(*args: str) -> str:
    done = subprocess.run([*BUILDAH, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"buildah {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


@pytest.fixture(scope="module")
def image():
    assert shutil.which("buildah"), "buildah is not installed (Debian's `buildah`)"
    if SUDO:
        assert subprocess.run([*SUDO, "true"]).returncode == 0, "the image test runs buildah as root (or sudo -n)"
    built = subprocess.run(
        [*SUDO, "env", f"JOCH_IMAGE={TAG}", str(ROOT / "scripts/image"), _required_env("JOCH_BIN")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    print(built.stdout.strip())
    yield TAG
    buildah("rmi", TAG)


class Ticket(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        answer = json.dumps({"ticket": 1, "subject": body["subject"]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def run(container: str, config: dict, volume: Path, port: int) -> Joch:
    """The image's entrypoint and command, as its user, with the volume
    mounted where the image declares it (host network: loopback only)."""
    command = [*config["Entrypoint"], *config["Cmd"]]
    process = subprocess.Popen(
        [*BUILDAH, "run", "--isolation", "chroot", "-v", f"{volume}:/var/lib/joch",
         "-e", f"JOCH_ADMIN_TOKEN={TOKEN}", "-e", f"JOCH_ADDR=127.0.0.1:{port}",
         container, "--", *command],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    server = Joch(process=process, base=f"http://127.0.0.1:{port}", token=TOKEN)
    threading.Thread(target=_drain, args=(process.stdout, []), daemon=True).start()
    threading.Thread(target=_drain, args=(process.stderr, server.stderr), daemon=True).start()

    def ready() -> bool:
        assert process.poll() is None, "".join(server.stderr)
        try:
            with urllib.request.urlopen(server.base + "/readyz", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    wait_until(ready, "the image's /readyz")
    return server


def stop(server: Joch) -> None:
    server.process.terminate()
    server.process.wait(timeout=30)


def test_image_runs_unprivileged_and_keeps_calls_in_its_volume(image: str, tmp_path: Path):
    config = json.loads(buildah("inspect", "--type", "image", image))["OCIv1"]["config"]
    assert config["User"] == "10001:10001"
    assert "/var/lib/joch" in config["Volumes"]
    assert "JOCH_DB=/var/lib/joch/joch.db" in config["Env"]
    assert config["Entrypoint"] == ["/usr/local/bin/joch"] and config["Cmd"] == ["serve"]

    webhook = HTTPServer(("127.0.0.1", 0), Ticket)
    threading.Thread(target=webhook.serve_forever, daemon=True).start()
    volume = tmp_path / "volume"
    volume.mkdir()
    subprocess.run([*SUDO, "chown", "10001:10001", str(volume)], check=True)
    container = buildah("from", "--name", f"joch-interop-{os.getpid()}", image)
    try:
        port = free_port()
        server = run(container, config, volume, port)
        server.ok("POST", "/v1/namespaces/default/tools", {
            "apiVersion": "joch.dev/v1alpha1", "kind": "Tool",
            "metadata": {"name": "support.open_ticket"},
            "spec": {
                "inputSchema": {"type": "object", "required": ["subject"]},
                "sideEffects": {"level": "external_write", "idempotent": False},
                "backend": {"type": "rest", "endpoint": {
                    "method": "POST", "url": f"http://127.0.0.1:{webhook.server_port}/"}},
            },
        })
        call = server.ok("POST", "/v1/namespaces/default/toolcalls", {
            "metadata": {"name": "call_image"},
            "spec": {"toolRef": {"name": "support.open_ticket"}, "input": {"subject": "refund"}},
        })
        assert call["status"]["phase"] == "Succeeded", call
        assert call["status"]["output"] == {"ticket": 1, "subject": "refund"}
        # The database was written by the image's user, not root.
        assert (volume / "joch.db").stat().st_uid == 10001
        stop(server)

        server = run(container, config, volume, port)
        again = server.ok("GET", "/v1/namespaces/default/toolcalls/call_image")
        assert again["status"]["phase"] == "Succeeded"
        assert again["status"]["output"] == call["status"]["output"]
        stop(server)
    finally:
        webhook.shutdown()
        buildah("rm", container)
