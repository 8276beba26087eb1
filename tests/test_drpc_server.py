"""The DRPC server (squall drpc) over real HTTP: callers, the invocations API, tokens, timeouts, and a Trident
topology that takes its requests from it."""

import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from squall import LocalCluster
from squall.drpc import DRPCClient, DRPCExecutionException, DRPCInvocations, DRPCServer
from squall.trident import TridentTopology
from squall.trident.builtin import Count, FilterNull, MapGet
from squall.trident.testing import FixedBatchSpout, MemoryMapState, Split


def serve_by_hand(invocations, function, answer, stop):
    """What a topology's driver does: take the function's requests and answer each."""
    got = threading.Event()
    invocations.register(function, got.set)
    while not stop.is_set():
        got.wait(0.05)
        got.clear()
        for request_id, args in invocations.take(function, 10):
            answer(invocations, request_id, args)


def test_a_request_goes_to_the_function_s_server_side_and_its_result_comes_back():
    with DRPCServer(port=0, timeout_secs=30) as server:
        invocations = DRPCInvocations(["127.0.0.1"], server.port)
        stop = threading.Event()

        def answer(source, request_id, args):
            if args == "bad":
                source.fail(request_id, "no such word")
            else:
                source.result(request_id, json.dumps([[args.upper()]]))

        thread = threading.Thread(target=serve_by_hand, args=(invocations, "shout", answer, stop), daemon=True)
        thread.start()
        try:
            with DRPCClient("127.0.0.1", server.port) as client:
                assert client.execute("shout", "hello") == '[["HELLO"]]'
                assert client.execute("shout", "again") == '[["AGAIN"]]'
                with pytest.raises(DRPCExecutionException, match="no such word"):
                    client.execute("shout", "bad")
        finally:
            stop.set()
            invocations.close()


def test_every_route_needs_the_token_and_a_request_nobody_serves_times_out():
    with DRPCServer(port=0, timeout_secs=0.5) as server:
        assert oct(server.token_file.stat().st_mode & 0o777) == "0o600"
        with pytest.raises(DRPCExecutionException, match="refused the token"):
            DRPCClient("127.0.0.1", server.port, token="wrong").execute("f", "x")
        started = time.monotonic()
        with pytest.raises(DRPCExecutionException, match="Timed Out"):
            DRPCClient("127.0.0.1", server.port).execute("nobody-serves-this", "x")
        assert time.monotonic() - started < 10
        token_file = server.token_file
    assert not token_file.exists()


def test_closing_the_server_fails_what_waits():
    server = DRPCServer(port=0, timeout_secs=60)
    client = DRPCClient("127.0.0.1", server.port)
    failure = []

    def call():
        try:
            client.execute("slow", "x")
        except DRPCExecutionException as exc:
            failure.append(str(exc))

    thread = threading.Thread(target=call)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.drpc._queues.get("slow") and time.monotonic() < deadline:
        time.sleep(0.01)
    server.close()
    thread.join(10)
    assert failure and "Server Shutting Down" in failure[0]


def test_a_trident_topology_answers_queries_from_squall_drpc(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path)}  # its token file, and the clients', under this home
    server = subprocess.Popen(
        [sys.executable, "-m", "squall.cli", "drpc", "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = server.stderr.readline()
        port = int(re.search(r"serving on 127\.0\.0\.1:(\d+)", line).group(1))
        token = (tmp_path / ".squall" / "drpc" / f"127.0.0.1_{port}.token").read_text()
        topology = TridentTopology()
        spout = FixedBatchSpout(["sentence"], 2, "the cow jumped over the moon", "the man went to the store")
        counts = (
            topology.new_stream("words", spout)
            .each(["sentence"], Split(), ["word"])
            .group_by(["word"])
            .persistent_aggregate(MemoryMapState.Factory(), Count(), ["count"])
        )
        (
            topology.new_drpc_stream("words")
            .each(["args"], Split(), ["word"])
            .group_by(["word"])
            .state_query(counts, ["word"], MapGet(), ["count"])
            .each(["count"], FilterNull())
            .project(["word", "count"])
        )
        conf = {"drpc.servers": ["127.0.0.1"], "drpc.port": port, "squall.drpc.token": token}
        with LocalCluster() as cluster, DRPCClient("127.0.0.1", port, token=token) as client:
            run = cluster.submit_topology("drpc-words", conf, topology.build())
            deadline = time.monotonic() + 60
            while not run.settled():
                assert time.monotonic() < deadline and not cluster.failures, cluster.failures
                time.sleep(0.05)
            assert sorted(json.loads(client.execute("words", "the cow nothing"))) == [["cow", 1], ["the", 4]]
    finally:
        server.terminate()
        assert server.wait(10) == 0


def test_a_topology_s_requests_close_when_it_stops_and_what_it_took_fails():
    with DRPCServer(port=0, timeout_secs=30) as server:
        invocations = DRPCInvocations(["127.0.0.1"], server.port)
        taken = threading.Event()
        invocations.register("f", taken.set)
        failures = []

        def call():
            try:
                DRPCClient("127.0.0.1", server.port).execute("f", "x")
            except DRPCExecutionException as exc:
                failures.append(str(exc))

        caller = threading.Thread(target=call)
        caller.start()
        assert taken.wait(10)  # the poll took the request; the topology stops before it begins
        invocations.unregister("f")  # its last function: it closes
        caller.join(10)
        assert failures and "the topology stopped" in failures[0]
