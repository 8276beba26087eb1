"""The CLI finds a web UI's token by host and port: this machine's token goes only to the address its squall run
serves, never to another host on the same port; a token for a squall run elsewhere is given explicitly."""

from __future__ import annotations

import http.server
import json
import threading

import pytest
from click.testing import CliRunner

from squall import LocalCluster
from squall.cli import main
from squall.model.errors import SquallError
from squall.ui.client import UIClient
from squall.ui.server import token_path


class Recorder(http.server.ThreadingHTTPServer):
    """Another host's HTTP server: answers every request, and records the Authorization header of each."""

    def __init__(self, address):
        self.authorizations: list[str | None] = []
        super().__init__(address, RecordingHandler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.shutdown()
        self.server_close()


class RecordingHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.server.authorizations.append(self.headers.get("Authorization"))
        body = json.dumps({"topology": "numbers", "status": "done"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def cluster():
    """A squall web UI on 127.0.0.1, whose token file this machine's user can read."""
    with LocalCluster({"squall.ui.port": 0, "squall.spark.master": "local[1]"}) as made:
        yield made


@pytest.fixture
def other_host(cluster):
    """Another address, on the very port the squall web UI serves (127.0.0.2: loopback, but not squall's)."""
    recorder = Recorder(("127.0.0.2", cluster.ui.port))
    yield recorder
    recorder.close()


def test_the_token_file_is_named_by_the_host_and_port_the_server_binds(cluster):
    assert cluster.ui.token_file == token_path("127.0.0.1", cluster.ui.port)
    assert cluster.ui.token_file.name == f"127.0.0.1_{cluster.ui.port}.token"
    assert cluster.ui.token_file.read_text() == cluster.ui.token


def test_a_url_of_the_local_server_gets_its_token(cluster):
    for host in ("127.0.0.1", "localhost"):
        with pytest.raises(SquallError) as answered:  # the token passed: the server looked for the topology
            UIClient(f"http://{host}:{cluster.ui.port}").control("no-such-topology", "deactivate")
        assert "404 no topology named 'no-such-topology'" in str(answered.value)


def test_another_host_on_the_same_port_never_gets_this_machines_token(cluster, other_host, monkeypatch):
    monkeypatch.delenv("SQUALL_UI_TOKEN", raising=False)
    url = f"http://127.0.0.2:{cluster.ui.port}"
    with pytest.raises(SquallError) as refused:
        UIClient(url).control("numbers", "deactivate")
    message = str(refused.value)
    assert f"no token for {url}" in message and "--token" in message and "SQUALL_UI_TOKEN" in message

    result = CliRunner().invoke(main, ["deactivate", "numbers", "--url", url])
    assert result.exit_code == 1 and "--token" in result.output
    assert other_host.authorizations == []  # nothing was sent at all

    # given explicitly, on the command line or in the environment, a token goes where the user sends it
    result = CliRunner().invoke(main, ["deactivate", "numbers", "--url", url, "--token", "its-own-token"])
    assert result.exit_code == 0, result.output
    monkeypatch.setenv("SQUALL_UI_TOKEN", "from-the-environment")
    result = CliRunner().invoke(main, ["activate", "numbers", "--url", url])
    assert result.exit_code == 0, result.output
    assert other_host.authorizations == ["Bearer its-own-token", "Bearer from-the-environment"]
    assert all(cluster.ui.token not in header for header in other_host.authorizations)
