"""The ZooKeeper coordinator store on a shared ZooKeeper: digest credentials (given, in the URL, or in config),
and an ACL on every znode it creates, so that a client without the credentials can neither read nor change the
coordinator's state; and TLS, with a client certificate. Against real ZooKeeper servers."""

import subprocess

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl
from servers import ZooKeeperServer, free_port, require, wait_for_port

from squall.connectors.common import BrokerUnavailable
from squall.model.errors import InvalidConfigError
from squall.transactional import TransactionCoordinator, open_coordinator_store
from squall.transactional.zookeeper import ZooKeeperCoordinatorStore, parse_zookeeper_url


def hosts(server) -> str:
    return f"127.0.0.1:{server.port}"


@pytest.fixture
def client_of(zookeeper_server):
    """Plain kazoo clients on the test server, with or without credentials, closed after the test."""
    clients = []

    def client(auth_data=None):
        made = KazooClient(hosts(zookeeper_server), auth_data=auth_data)
        made.start(timeout=10)
        clients.append(made)
        return made

    yield client
    for made in clients:
        made.stop()
        made.close()


def test_a_url_with_credentials_parses_into_hosts_root_and_digest_auth():
    location = parse_zookeeper_url("zookeeper://squall:s3cr%40t@zk1:2181,zk2:2181/apps/squall")
    assert (location.hosts, location.root) == ("zk1:2181,zk2:2181", "/apps/squall")
    assert location.options == {"auth_data": [("digest", "squall:s3cr@t")]}
    assert "s3cr" not in repr(location)

    plain = parse_zookeeper_url("zookeeper://zk1:2181")
    assert (plain.hosts, plain.root, plain.options) == ("zk1:2181", "/squall", {})

    tls = parse_zookeeper_url(
        "zookeeper://zk1:2281/r?ssl=true&ca=/etc/zk/ca.pem&certfile=/c.pem&keyfile=/k.pem&verify=no"
    )
    assert tls.options == {
        "use_ssl": True,
        "ca": "/etc/zk/ca.pem",
        "certfile": "/c.pem",
        "keyfile": "/k.pem",
        "verify_certs": False,
    }
    with pytest.raises(ValueError, match="unknown parameter 'sssl'"):
        parse_zookeeper_url("zookeeper://zk1:2181/r?sssl=true")
    with pytest.raises(ValueError) as bad:
        parse_zookeeper_url("zookeeper://squall@zk1:2181/r")
    assert "user:password@" in str(bad.value)


def test_the_store_authenticates_and_its_znodes_carry_an_acl_for_that_user_alone(zookeeper_server, client_of):
    url = f"zookeeper://squall:zk-secret@{hosts(zookeeper_server)}/secured"
    with ZooKeeperCoordinatorStore.from_url(url, "topo") as store:
        assert store.hosts == hosts(zookeeper_server)  # the userinfo is not part of the host list
        coordinator = TransactionCoordinator(store, max_pending=1)
        (emit,) = coordinator.poll()
        assert coordinator.record_metadata(emit.attempt, {"partitions": 1})
        assert coordinator.processed(emit.attempt)
        (commit,) = coordinator.poll()
        assert coordinator.committed(commit.attempt)
        assert (store.get("last_committed"), store.get("meta/1")) == (1, {"partitions": 1})

    owner_acl = make_digest_acl("squall", "zk-secret", all=True)
    owner = client_of(auth_data=[("digest", "squall:zk-secret")])
    stranger = client_of()
    for path in ("/secured", "/secured/topo", "/secured/topo/last_committed", "/secured/topo/meta/1"):
        assert owner.get_acls(path)[0] == [owner_acl], path
        for refused in (stranger.get, stranger.get_acls, stranger.get_children):
            with pytest.raises(NoAuthError):
                refused(path)
    assert owner.get("/secured/topo/last_committed")[0] == b"1"
    with pytest.raises(NoAuthError):
        stranger.set("/secured/topo/last_committed", b"99")
    with pytest.raises(NoAuthError):
        stranger.create("/secured/topo/next_txid", b"99")
    with pytest.raises(NoAuthError):
        stranger.delete("/secured/topo/meta/1")
    wrong = client_of(auth_data=[("digest", "squall:not-the-secret")])
    with pytest.raises(NoAuthError):
        wrong.get("/secured/topo/last_committed")

    # the same user, from config this time: the coordinator's state is there for it after a restart
    conf = {"squall.zookeeper.auth": "squall:zk-secret"}
    store = open_coordinator_store(f"zookeeper://{hosts(zookeeper_server)}/secured", "topo", conf)
    try:
        assert TransactionCoordinator(store, max_pending=2).last_committed == 1
    finally:
        store.close()


def test_without_credentials_the_store_cannot_read_a_secured_topology(zookeeper_server):
    with ZooKeeperCoordinatorStore(hosts(zookeeper_server), "/locked", "topo", auth_data="squall:zk-secret") as store:
        store.put("next_txid", 7)
    with ZooKeeperCoordinatorStore(hosts(zookeeper_server), "/locked", "topo") as stranger, pytest.raises(NoAuthError):
        stranger.get("next_txid")


def test_config_credentials_and_a_bad_url_name_the_store_key(zookeeper_server):
    with pytest.raises(InvalidConfigError) as bad:
        open_coordinator_store(f"zookeeper://squall@{hosts(zookeeper_server)}/r", "topo", {})
    assert "squall.transactional.store" in str(bad.value)


def make_certificates(directory):
    """A CA, and a certificate it signed for 127.0.0.1 for each of the server and the client (PEM files)."""
    openssl = require("openssl", "openssl")

    def run(*args):
        subprocess.run([openssl, *args], cwd=directory, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
        "-subj", "/CN=squall test CA")  # fmt: skip
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "other-ca.key", "-out", "other-ca.pem",
        "-days", "1", "-subj", "/CN=another CA")  # fmt: skip
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for who in ("server", "client"):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{who}.key", "-out", f"{who}.csr",
            "-subj", "/CN=127.0.0.1")  # fmt: skip
        run("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{who}.pem", "-days", "1", "-extfile", "san.ext")  # fmt: skip
    keystore = (directory / "server.key").read_text() + (directory / "server.pem").read_text()
    (directory / "server-keystore.pem").write_text(keystore)
    return {name: str(directory / f"{name}.pem") for name in ("ca", "other-ca", "client")} | {
        "client-key": str(directory / "client.key")
    }


class TlsZooKeeperServer(ZooKeeperServer):
    """The test ZooKeeper with a TLS port too (Netty, PEM files), which asks for a client certificate."""

    NETTY_CODEC = "/usr/share/java/netty-codec.jar"  # Debian's zookeeper.jar leaves it off its class path

    def __init__(self, directory, certificates):
        self.secure_port, self.certificates = free_port(), certificates
        super().__init__(directory)

    def start(self):
        require(self.NETTY_CODEC, "libnetty-java")
        with open(self.config, "a") as config:
            config.write(
                f"secureClientPort={self.secure_port}\nsecureClientPortAddress=127.0.0.1\n"
                "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n"
                f"ssl.keyStore.location={self.directory / 'server-keystore.pem'}\nssl.keyStore.type=PEM\n"
                f"ssl.trustStore.location={self.certificates['ca']}\nssl.trustStore.type=PEM\n"
            )
        args = [self.java, "-cp", f"/etc/zookeeper/conf:{self.JAR}:{self.NETTY_CODEC}"]
        args += ["-Dzookeeper.root.logger=WARN,CONSOLE", "org.apache.zookeeper.server.ZooKeeperServerMain"]
        log = open(self.directory / "zookeeper.log", "ab")  # noqa: SIM115 - the server process holds it
        self.process = subprocess.Popen([*args, str(self.config)], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        wait_for_port(self.port, self.process, "zookeeper")
        wait_for_port(self.secure_port, self.process, "zookeeper's TLS port")
        self._wait_serving()


@pytest.fixture
def tls_zookeeper(tmp_path):
    certificates = make_certificates(tmp_path)
    server = TlsZooKeeperServer(tmp_path, certificates)
    yield server
    server.stop()


def test_the_store_over_tls_with_a_client_certificate_from_config_or_the_url(tls_zookeeper):
    cert = tls_zookeeper.certificates
    secure = f"127.0.0.1:{tls_zookeeper.secure_port}"
    conf = {
        "squall.zookeeper.ssl": True,
        "squall.zookeeper.ssl.ca": cert["ca"],
        "squall.zookeeper.ssl.certfile": cert["client"],
        "squall.zookeeper.ssl.keyfile": cert["client-key"],
        "squall.zookeeper.auth": "squall:zk-secret",
    }
    store = open_coordinator_store(f"zookeeper://{secure}/tls", "topo", conf)
    try:
        store.put("next_txid", 3)
    finally:
        store.close()
    query = f"ssl=true&ca={cert['ca']}&certfile={cert['client']}&keyfile={cert['client-key']}"
    with ZooKeeperCoordinatorStore.from_url(f"zookeeper://squall:zk-secret@{secure}/tls?{query}", "topo") as store:
        assert store.get("next_txid") == 3

    # a server certificate the given CA did not sign is refused; so is a client without a certificate
    for refused in (
        {"use_ssl": True, "ca": cert["other-ca"], "certfile": cert["client"], "keyfile": cert["client-key"]},
        {"use_ssl": True, "ca": cert["ca"]},
        {},  # plain ZooKeeper protocol on the TLS port
    ):
        with pytest.raises(BrokerUnavailable) as failed:
            ZooKeeperCoordinatorStore(secure, "/tls", "topo", timeout=3, **refused)
        assert secure in str(failed.value)
