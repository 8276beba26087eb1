"""The ZooKeeper coordinator store, against a real ZooKeeper server."""

import json
import random
import threading
import time

import pytest
from kazoo.client import KazooClient
from servers import free_port
from tx_components import commits, counter, emits

from squall.connectors.redis_streams import BrokerUnavailable
from squall.transactional import SqliteCoordinatorStore, TransactionCoordinator
from squall.transactional.coordinator import Phase
from squall.transactional.zookeeper import ZooKeeperCoordinatorStore


def hosts(server) -> str:
    return f"127.0.0.1:{server.port}"


@pytest.fixture
def zk(zookeeper_server):
    return zookeeper_server


@pytest.fixture
def open_stores():
    """Opens stores on request and closes them all after the test."""
    stores = []

    def open_store(server, topology_id="topo", root="/squall", **kwargs):
        store = ZooKeeperCoordinatorStore(hosts(server), root, topology_id, **kwargs)
        stores.append(store)
        return store

    yield open_store
    for store in stores:
        store.close()


@pytest.fixture
def raw(zk):
    """A plain kazoo client, to look at the znodes themselves."""
    client = KazooClient(hosts(zk))
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def test_put_get_round_trip_and_the_znode_holds_the_json(zk, open_stores, raw):
    store = open_stores(zk)
    meta = {"partitions": 2, "p": {"0": {"index": 0, "amount": 3}, "1": [1, 2.5, None, True, "x"]}}
    store.put("meta/3", meta)
    store.put("next_txid", 4)
    store.put("label", "naïve ✓")
    assert store.get("meta/3") == meta
    assert store.get("next_txid") == 4
    assert store.get("label") == "naïve ✓"
    store.put("next_txid", 5)  # overwrite
    assert store.get("next_txid") == 5
    data, _ = raw.get("/squall/topo/meta/3")
    assert json.loads(data) == meta
    assert raw.get("/squall/topo/next_txid")[0] == b"5"
    assert sorted(raw.get_children("/squall/topo")) == ["label", "meta", "next_txid"]


def test_missing_keys_and_levels_in_between_give_the_default(zk, open_stores):
    store = open_stores(zk)
    assert store.get("last_committed") is None
    assert store.get("last_committed", 0) == 0
    assert store.keys() == []
    store.put("meta/1", {"m": 1})
    assert store.get("meta") is None  # a level, not a key
    assert store.get("meta", "d") == "d"
    assert store.keys() == ["meta/1"]


def test_values_must_be_json(zk, open_stores):
    store = open_stores(zk)
    with pytest.raises(TypeError, match=r"coordinator state 'meta/1' must be JSON-serializable"):
        store.put("meta/1", {"when": object()})
    assert store.get("meta/1") is None and store.keys() == []


def test_bad_keys_are_refused(zk, open_stores):
    store = open_stores(zk)
    for key in ("", "a//b", "/a", "a/", "a/../b"):
        with pytest.raises(ValueError, match="not a valid ZooKeeper path"):
            store.put(key, 1)
    with pytest.raises(ValueError, match="topology_id"):
        ZooKeeperCoordinatorStore(hosts(zk), "/squall", "a/b")


def fill(store):
    for key, value in [("meta/10", 10), ("meta/2", 2), ("next_txid", 11), ("other/5", 5)]:
        store.put(key, value)
    store.put("meta/1", 1)
    store.put("last_committed", 9)


def test_keys_are_ordered_like_the_sqlite_store(zk, open_stores, tmp_path):
    store = open_stores(zk)
    sqlite = SqliteCoordinatorStore(tmp_path / "c.sqlite", "topo")
    fill(store)
    fill(sqlite)
    expected = ["last_committed", "next_txid", "meta/1", "meta/2", "other/5", "meta/10"]
    assert store.keys() == sqlite.keys() == expected
    assert store.keys("meta/") == sqlite.keys("meta/") == ["meta/1", "meta/2", "meta/10"]
    assert store.keys("meta/1") == sqlite.keys("meta/1") == ["meta/1", "meta/10"]
    assert store.keys("ne") == sqlite.keys("ne") == ["next_txid"]
    assert store.keys("nothing/") == sqlite.keys("nothing/") == []
    sqlite.close()


def test_delete_below(zk, open_stores, raw, tmp_path):
    store = open_stores(zk)
    sqlite = SqliteCoordinatorStore(tmp_path / "c.sqlite", "topo")
    fill(store)
    fill(sqlite)
    store.delete_below("meta/", 10)
    sqlite.delete_below("meta/", 10)
    assert store.keys() == sqlite.keys() == ["last_committed", "next_txid", "other/5", "meta/10"]
    assert sorted(raw.get_children("/squall/topo/meta")) == ["10"]
    store.delete_below("meta/", 10)  # nothing more to delete
    store.delete_below("other/", 6)
    assert store.keys() == ["last_committed", "next_txid", "meta/10"]
    assert store.get("meta/2") is None and store.get("meta/10") == 10
    sqlite.close()


def test_a_failed_transaction_writes_nothing(zk, open_stores, raw):
    store = open_stores(zk)
    observer = open_stores(zk)
    store.put("last_committed", 1)
    store.put("meta/1", {"m": 1})
    with pytest.raises(RuntimeError, match="boom"), store.transaction():
        store.put("last_committed", 2)
        store.put("meta/2", {"m": 2})
        store.delete_below("meta/", 2)
        assert observer.get("last_committed") == 1  # nothing is visible before the end
        raise RuntimeError("boom")
    for s in (store, observer):
        assert s.get("last_committed") == 1
        assert s.keys() == ["last_committed", "meta/1"]
    assert raw.exists("/squall/topo/meta/2") is None
    assert raw.get("/squall/topo/last_committed")[0] == b"1"
    assert sorted(raw.get_children("/squall/topo/meta")) == ["1"]


def test_a_transaction_writes_everything_in_one_multi(zk, open_stores, raw):
    store = open_stores(zk)
    observer = open_stores(zk)
    store.put("last_committed", 1)
    store.put("meta/1", {"m": 1})
    with store.transaction():
        store.put("last_committed", 2)
        store.put("meta/2", {"m": 2})
        store.put("meta/3", {"m": 3})
        store.delete_below("meta/", 2)
        assert observer.keys() == ["last_committed", "meta/1"]  # no partial state in the meantime
        assert raw.exists("/squall/topo/meta/2") is None
    assert observer.get("last_committed") == 2
    assert observer.keys() == ["last_committed", "meta/2", "meta/3"]
    # one multi is one ZooKeeper transaction: every node it wrote has the same zxid
    zxids = {raw.exists(f"/squall/topo/{k}").mzxid for k in ("last_committed", "meta/2", "meta/3")}
    assert len(zxids) == 1


def test_reads_inside_a_transaction_see_its_writes(zk, open_stores):
    store = open_stores(zk)
    store.put("meta/1", 1)
    store.put("meta/2", 2)
    with store.transaction():
        store.put("meta/3", 3)
        store.put("k", "first")
        store.put("k", "second")  # the same key twice: the last value wins
        store.delete_below("meta/", 2)
        assert store.get("k") == "second"
        assert store.get("meta/1") is None and store.get("meta/1", "gone") == "gone"
        assert store.keys("meta/") == ["meta/2", "meta/3"]
        store.put("meta/1", "back")  # deleted, then written again in the same transaction
        store.put("tmp/9", 9)
        store.delete_below("tmp/", 10)  # written, then deleted: never reaches ZooKeeper
        assert store.keys() == ["k", "meta/1", "meta/2", "meta/3"]
    assert store.get("k") == "second"
    assert store.keys() == ["k", "meta/1", "meta/2", "meta/3"]
    assert store.get("meta/1") == "back"


def test_nested_transactions_join_the_outer_one(zk, open_stores):
    store = open_stores(zk)
    observer = open_stores(zk)
    with store.transaction():
        store.put("a", 1)
        with store.transaction():
            store.put("b", 2)
        assert observer.keys() == []  # the inner end commits nothing
        store.put("c", 3)
    assert observer.keys() == ["a", "b", "c"]
    with pytest.raises(KeyError), store.transaction():
        with store.transaction():
            store.put("d", 4)
        raise KeyError("outer fails")
    assert observer.keys() == ["a", "b", "c"]


def test_topologies_under_one_root_are_apart(zk, open_stores, raw):
    one, two = open_stores(zk, "one"), open_stores(zk, "two")
    one.put("last_committed", 1)
    one.put("meta/1", "one's")
    two.put("meta/1", "two's")
    assert one.keys() == ["last_committed", "meta/1"] and two.keys() == ["meta/1"]
    assert one.get("meta/1") == "one's" and two.get("meta/1") == "two's"
    assert two.get("last_committed") is None
    two.delete_below("meta/", 5)
    assert one.keys("meta/") == ["meta/1"] and two.keys() == []
    assert sorted(raw.get_children("/squall")) == ["one", "two"]


def test_the_root_path_is_configurable(zk, open_stores, raw):
    store = open_stores(zk, "t", root="/apps/storm/transactional/")
    assert store.base == "/apps/storm/transactional/t"
    store.put("next_txid", 7)
    store.put("meta/6", {"m": 6})
    assert raw.get("/apps/storm/transactional/t/next_txid")[0] == b"7"
    assert json.loads(raw.get("/apps/storm/transactional/t/meta/6")[0]) == {"m": 6}
    assert raw.exists("/squall") is None
    assert open_stores(zk, "t").get("next_txid") is None  # the default root is elsewhere


def test_from_url(zk, open_stores, raw):
    port = zk.port
    plain = ZooKeeperCoordinatorStore.from_url(zk.url, "t")
    slash = ZooKeeperCoordinatorStore.from_url(f"{zk.url}/", "t")
    deep = ZooKeeperCoordinatorStore.from_url(f"{zk.url}/a/b/", "t")
    both = ZooKeeperCoordinatorStore.from_url(f"zookeeper://127.0.0.1:{port},localhost:{port}/a/b", "t")
    try:
        assert (plain.hosts, plain.root, plain.base) == (f"127.0.0.1:{port}", "/squall", "/squall/t")
        assert (slash.root, slash.base) == ("/squall", "/squall/t")
        assert (deep.root, deep.base) == ("/a/b", "/a/b/t")
        assert (both.hosts, both.base) == (f"127.0.0.1:{port},localhost:{port}", "/a/b/t")
        plain.put("x", 1)
        deep.put("x", 2)
        assert both.get("x") == 2 and slash.get("x") == 1
        assert raw.get("/squall/t/x")[0] == b"1" and raw.get("/a/b/t/x")[0] == b"2"
    finally:
        for s in (plain, slash, deep, both):
            s.close()
    for bad in ("redis://127.0.0.1:6379/0", "zookeeper:///root", "127.0.0.1:2181"):
        with pytest.raises(ValueError, match="zookeeper://"):
            ZooKeeperCoordinatorStore.from_url(bad, "t")


def test_reopening_after_close_sees_the_data(zk):
    store = ZooKeeperCoordinatorStore.from_url(zk.url, "t")
    with store.transaction():
        store.put("last_committed", 3)
        store.put("meta/3", {"p": {"0": 9}})
    store.close()
    with ZooKeeperCoordinatorStore.from_url(zk.url, "t") as again:
        assert again.get("last_committed") == 3
        assert again.get("meta/3") == {"p": {"0": 9}}
        assert again.keys() == ["last_committed", "meta/3"]


def test_an_unreachable_server_is_a_clear_error():
    port = free_port()  # nothing listens here
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable, match=rf"^cannot reach ZooKeeper at 127\.0\.0\.1:{port}: "):
        ZooKeeperCoordinatorStore(f"127.0.0.1:{port}", "/squall", "t", timeout=0.5)
    with pytest.raises(BrokerUnavailable, match=rf"cannot reach ZooKeeper at 127\.0\.0\.1:{port},127\.0\.0\.1:"):
        ZooKeeperCoordinatorStore.from_url(f"zookeeper://127.0.0.1:{port},127.0.0.1:{free_port()}/x", "t", timeout=0.5)
    assert time.monotonic() - started < 10


def test_the_store_outlives_a_server_restart(zk, open_stores):
    store = open_stores(zk)
    store.put("last_committed", 1)
    zk.stop()
    zk.start()
    assert store.get("last_committed") == 1  # the same data dir
    with store.transaction():
        store.put("last_committed", 2)
        store.put("meta/2", {"m": 2})
    assert store.keys() == ["last_committed", "meta/2"]

    # a write made while the server is down waits for it to come back
    zk.stop()
    outcome = {}

    def write():
        try:
            store.put("next_txid", 5)
            outcome["done"] = True
        except Exception as exc:
            outcome["error"] = exc

    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(1.0)
    assert outcome == {}
    zk.start()  # the waiting write goes through without waiting for the server to be serving
    writer.join(60)
    assert outcome == {"done": True}
    assert store.get("next_txid") == 5 and store.get("last_committed") == 2


# -- the coordinator on top ------------------------------------------------------


def test_the_coordinator_resumes_from_a_new_store(zk):
    store = ZooKeeperCoordinatorStore.from_url(zk.url, "tx")
    first = TransactionCoordinator(store, max_pending=2, new_attempt_id=counter())
    for cycle in range(3):  # txids 1..3 commit; 4 and 5 are in flight
        out = first.poll()
        for txid, _ in emits(out):
            assert first.record_metadata(first.active[txid].attempt, {"p": {"0": {"index": txid}}})
        oldest = first.active[min(first.active)].attempt
        assert first.processed(oldest)
        (attempt,) = commits(first.poll())
        assert attempt == oldest and attempt.txid == cycle + 1
        assert first.committed(attempt)
    assert emits(first.poll()) == [(5, 104)]
    assert first.record_metadata(first.active[5].attempt, {"p": {"0": {"index": 5}}})
    assert first.last_committed == 3 and first.next_txid == 6
    assert store.keys() == ["last_committed", "next_txid", "meta/3", "meta/4", "meta/5"]
    store.close()

    store = ZooKeeperCoordinatorStore.from_url(zk.url, "tx")
    again = TransactionCoordinator(store, max_pending=2, new_attempt_id=counter(200))
    assert again.last_committed == 3 and again.next_txid == 6
    assert emits(again.poll()) == [(4, 200), (5, 201)]  # the in-flight ones again, nothing new
    assert again.metadata(4) == {"p": {"0": {"index": 4}}}
    assert again.metadata(3) == {"p": {"0": {"index": 3}}}  # where batch 4 starts from
    b4 = again.active[4].attempt
    assert again.processed(b4)
    assert commits(again.poll()) == [b4]
    assert again.committed(b4)
    assert store.keys() == ["last_committed", "next_txid", "meta/4", "meta/5"]
    other = TransactionCoordinator(ZooKeeperCoordinatorStore.from_url(zk.url, "another"), 1)
    assert other.last_committed == 0 and other.next_txid == 1
    other.store.close()
    store.close()


def drive(store, seed):
    """A random but reproducible run: what it emitted and committed, and what the store holds at the end."""
    rng = random.Random(seed)
    c = TransactionCoordinator(store, max_pending=3, new_attempt_id=counter())
    log = []
    for _ in range(80):
        out = c.poll(ready=rng.random() < 0.9)
        log.append((emits(out), [a.txid for a in commits(out)]))
        for txid, _ in emits(out):
            c.record_metadata(c.active[txid].attempt, {"seed": seed, "txid": txid})
        if not c.active:
            continue
        tx = c.active[rng.choice(sorted(c.active))]
        fitting = "committed" if tx.phase is Phase.COMMITTING else "processed"
        kind = "failed" if rng.random() < 0.1 else fitting
        log.append((kind, tx.attempt.txid, getattr(c, kind)(tx.attempt)))
    return log, {k: store.get(k) for k in store.keys()}  # noqa: SIM118 - not a dict


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_coordinator_behaves_the_same_on_zookeeper_and_sqlite(zk, open_stores, tmp_path, seed):
    sqlite = SqliteCoordinatorStore(tmp_path / "c.sqlite", "t")
    on_sqlite = drive(sqlite, seed)
    sqlite.close()
    on_zookeeper = drive(open_stores(zk, "t"), seed)
    assert on_zookeeper == on_sqlite
    assert on_zookeeper[1]["last_committed"] >= 10  # the run did commit, again and again
