"""A link's mutual authentication, and the frames that follow it.

Both ends of every squall connection (a worker to the driver's hub, a worker to a peer worker) hold the run's
secret: the driver makes it, and it reaches the workers only inside the Spark task closure. It never crosses a
squall link. A connection opens with three messages::

    client -> server   HELLO      MAGIC | flags | client nonce (32 bytes)
    server -> client   CHALLENGE  server nonce (32) | HMAC-SHA256(secret, "server" | transcript)
    client -> server   PROOF      HMAC-SHA256(secret, "client" | transcript)

where ``transcript`` is ``MAGIC | flags | client nonce | server nonce``. The client checks the server's MAC
before it sends or reads anything more; the server checks the client's before it reads a single frame. Both
nonces are fresh, so a recorded handshake replayed fails, and the two MACs carry different labels, so neither
can be reflected back at its sender. ``flags`` says whether the link is encrypted; it is in the transcript, so
it cannot be changed on the way.

From the transcript both ends derive two keys (HKDF-SHA256 over the secret): one for each direction. Every
frame after the handshake carries a tag under its direction's key, and each direction's nonce is its count of
frames sent, so a frame that was changed, dropped, reordered, replayed or injected into the connection fails,
and the connection is closed before anything of it is unpickled:

* on an encrypted link a frame travels as a record, ``length (4 bytes) | AES-256-GCM(frame)``, its length
  authenticated too;
* on a link that is not encrypted it travels in clear, ``HEADER | pickle | tag``, the tag a GMAC (AES-GCM over
  no plaintext) of the pickle, with the header's destination in the nonce and its length in the GMAC.

The classes here are pure: bytes in, bytes out. ``client_handshake`` and ``server_handshake`` run them over a
blocking connection; the driver's hub runs ``ServerHandshake`` from its poll loop.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import struct
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

MAGIC = b"SQL1"
NONCE_BYTES = 32
MAC_BYTES = 32
ENCRYPTED = 1
HELLO_BYTES = len(MAGIC) + 1 + NONCE_BYTES
CHALLENGE_BYTES = NONCE_BYTES + MAC_BYTES
PROOF_BYTES = MAC_BYTES
SECRET_BYTES = 32

FRAME_HEADER = struct.Struct("!Ii")  # a frame's payload length and destination (``protocol.HEADER``)
RECORD_HEADER = struct.Struct("!I")  # an encrypted record's length
TAG_BYTES = 16
MAX_RECORD_BYTES = (1 << 31) - 1  # what AES-GCM takes in one call; a length beyond it is no frame squall sent


class HandshakeFailed(Exception):
    """The other end did not prove the run's secret, spoke another protocol, or sent a record that does not
    decrypt. The connection must be closed without reading on."""


@dataclass(frozen=True, slots=True)
class LinkKeys:
    """A run's link secret, and whether its links are encrypted. Its ``repr`` never shows the secret."""

    secret: bytes
    encrypt: bool = False

    @classmethod
    def generate(cls, encrypt: bool = False) -> LinkKeys:
        return cls(secrets.token_bytes(SECRET_BYTES), encrypt)

    def __repr__(self) -> str:
        return f"LinkKeys(secret=<{len(self.secret)} bytes>, encrypt={self.encrypt})"

    @property
    def flags(self) -> int:
        return ENCRYPTED if self.encrypt else 0


def _mac(secret: bytes, label: bytes, transcript: bytes) -> bytes:
    return hmac.new(secret, label + transcript, hashlib.sha256).digest()


def _session(keys: LinkKeys, transcript: bytes, client: bool) -> Session:
    material = HKDF(hashes.SHA256(), 64, salt=transcript, info=b"squall link keys").derive(keys.secret)
    to_server, to_client = material[:32], material[32:]
    if client:
        return Session(to_server, to_client, keys.encrypt)
    return Session(to_client, to_server, keys.encrypt)


class ClientHandshake:
    """The connecting end: ``hello`` first, then ``answer`` the server's challenge."""

    def __init__(self, keys: LinkKeys) -> None:
        self._keys = keys
        self.hello = MAGIC + bytes([keys.flags]) + secrets.token_bytes(NONCE_BYTES)

    def answer(self, challenge: bytes) -> tuple[bytes, Session]:
        """The proof to send, and the session; raises ``HandshakeFailed`` when the server does not know the
        secret."""
        if len(challenge) != CHALLENGE_BYTES:
            raise HandshakeFailed("the other end closed during the handshake")
        server_nonce, server_mac = challenge[:NONCE_BYTES], challenge[NONCE_BYTES:]
        transcript = self.hello + server_nonce
        if not hmac.compare_digest(server_mac, _mac(self._keys.secret, b"server", transcript)):
            raise HandshakeFailed("the other end did not prove the run's secret")
        return _mac(self._keys.secret, b"client", transcript), _session(self._keys, transcript, client=True)


class ServerHandshake:
    """The accepting end: ``challenge`` the client's hello, then ``finish`` with its proof."""

    def __init__(self, keys: LinkKeys) -> None:
        self._keys = keys
        self._transcript: bytes | None = None

    def challenge(self, hello: bytes) -> bytes:
        if len(hello) != HELLO_BYTES or hello[: len(MAGIC)] != MAGIC:
            raise HandshakeFailed("the other end does not speak squall's link protocol")
        if hello[len(MAGIC)] != self._keys.flags:
            raise HandshakeFailed("the other end's link encryption setting differs from this run's")
        nonce = secrets.token_bytes(NONCE_BYTES)
        self._transcript = hello + nonce
        return nonce + _mac(self._keys.secret, b"server", self._transcript)

    def finish(self, proof: bytes) -> Session:
        if self._transcript is None:
            raise HandshakeFailed("a proof before the hello")
        if len(proof) != PROOF_BYTES or not hmac.compare_digest(
            proof, _mac(self._keys.secret, b"client", self._transcript)
        ):
            raise HandshakeFailed("the other end did not prove the run's secret")
        return _session(self._keys, self._transcript, client=False)


class Session:
    """One authenticated connection's frames, in both directions: each frame sealed with a tag (and encrypted,
    when ``encrypted``) under its direction's key.

    ``seal`` must be called in the order the frames go onto the wire, and ``frames``/``read`` in the order they
    came off it: each direction's nonce is its count of frames."""

    __slots__ = ("_received", "_receiving", "_sending", "_sent", "encrypted")

    def __init__(self, sending_key: bytes, receiving_key: bytes, encrypted: bool) -> None:
        self.encrypted = encrypted
        self._sending = AESGCM(sending_key)
        self._receiving = AESGCM(receiving_key)
        self._sent = 0
        self._received = 0

    def seal(self, frame: bytes) -> bytes:
        """What goes on the wire for ``frame`` (a ``FRAME_HEADER`` and its payload)."""
        if len(frame) + TAG_BYTES > MAX_RECORD_BYTES:
            raise ValueError(f"a frame of {len(frame)} bytes is more than a link carries at once")
        count, self._sent = self._sent, self._sent + 1
        if self.encrypted:
            length = RECORD_HEADER.pack(len(frame) + TAG_BYTES)
            return length + self._sending.encrypt(_nonce(b"\0\0\0\0", count), frame, length)
        payload = memoryview(frame)[FRAME_HEADER.size :]
        return frame + self._sending.encrypt(_nonce(frame[4 : FRAME_HEADER.size], count), b"", payload)

    def _verify(self, destination: bytes, payload: bytes | bytearray | memoryview, tag: bytes) -> None:
        """A frame in clear: its tag must hold, or nothing of it is used."""
        count, self._received = self._received, self._received + 1
        try:
            self._receiving.decrypt(_nonce(destination, count), tag, payload)
        except InvalidTag:
            raise HandshakeFailed("a frame's tag does not hold: changed, injected, replayed or out of order") from None

    def _open(self, header: bytes, record: bytes) -> tuple[int, memoryview]:
        """An encrypted record's frame, as its destination and payload."""
        count, self._received = self._received, self._received + 1
        try:
            frame = self._receiving.decrypt(_nonce(b"\0\0\0\0", count), record, header)
        except InvalidTag:
            raise HandshakeFailed("a record did not decrypt: changed, injected, replayed or out of order") from None
        payload_length, destination = FRAME_HEADER.unpack_from(frame)
        if payload_length != len(frame) - FRAME_HEADER.size:
            raise HandshakeFailed("a frame's length differs from its record's")
        return destination, memoryview(frame)[FRAME_HEADER.size :]

    def frames(self, buffer: bytearray) -> tuple[list[tuple[int, int, bytes | memoryview]], int]:
        """The whole frames at the start of ``buffer``, as ``(wire bytes, destination, payload)``, and how many
        bytes of ``buffer`` they took; raises ``HandshakeFailed`` on one whose tag does not hold."""
        found: list[tuple[int, int, bytes | memoryview]] = []
        start = 0
        if not self.encrypted:
            while len(buffer) - start >= FRAME_HEADER.size:
                length, destination = FRAME_HEADER.unpack_from(buffer, start)
                _check_record(length + FRAME_HEADER.size + TAG_BYTES)
                body = start + FRAME_HEADER.size
                end = body + length + TAG_BYTES
                if len(buffer) < end:
                    break
                payload = buffer[body : body + length]
                self._verify(bytes(buffer[start + 4 : body]), payload, bytes(buffer[end - TAG_BYTES : end]))
                found.append((end - start, destination, payload))
                start = end
            return found, start
        while len(buffer) - start >= RECORD_HEADER.size:
            (length,) = RECORD_HEADER.unpack_from(buffer, start)
            _check_record(length)
            end = start + RECORD_HEADER.size + length
            if len(buffer) < end:
                break
            header = bytes(buffer[start : start + RECORD_HEADER.size])
            destination, payload = self._open(header, bytes(buffer[start + RECORD_HEADER.size : end]))
            found.append((RECORD_HEADER.size + length, destination, payload))
            start = end
        return found, start

    def read(self, read: Callable[[int], bytes]) -> tuple[int, int, bytes | memoryview] | None:
        """The next frame from a blocking stream, as ``(wire bytes, destination, payload)``; ``None`` when the
        stream ended (midway or not). Raises ``HandshakeFailed`` on a frame whose tag does not hold."""
        if not self.encrypted:
            header = read(FRAME_HEADER.size)
            if len(header) < FRAME_HEADER.size:
                return None
            length, destination = FRAME_HEADER.unpack(header)
            _check_record(length + FRAME_HEADER.size + TAG_BYTES)
            payload = read(length)
            tag = read(TAG_BYTES)
            if len(payload) < length or len(tag) < TAG_BYTES:
                return None
            self._verify(header[4:], payload, tag)
            return FRAME_HEADER.size + length + TAG_BYTES, destination, payload
        header = read(RECORD_HEADER.size)
        if len(header) < RECORD_HEADER.size:
            return None
        (length,) = RECORD_HEADER.unpack(header)
        _check_record(length)
        record = read(length)
        if len(record) < length:
            return None
        destination, payload = self._open(header, record)
        return RECORD_HEADER.size + length, destination, payload


def _nonce(destination: bytes, count: int) -> bytes:
    return destination + count.to_bytes(8, "big")


def _check_record(length: int) -> None:
    if length > MAX_RECORD_BYTES or length < TAG_BYTES + FRAME_HEADER.size:
        raise HandshakeFailed(f"a record of {length} bytes is no squall frame")


def _read_exactly(read: Callable[[int], bytes], size: int) -> bytes:
    """``size`` bytes, or fewer only when the stream ended: a read may return less than it was asked for."""
    data = b""
    while len(data) < size:
        chunk = read(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def client_handshake(read: Callable[[int], bytes], write: Callable[[bytes], None], keys: LinkKeys) -> Session:
    """Run the client's side over a blocking connection (``read(n)`` returns fewer bytes only at its end)."""
    handshake = ClientHandshake(keys)
    write(handshake.hello)
    proof, session = handshake.answer(_read_exactly(read, CHALLENGE_BYTES))
    write(proof)
    return session


def server_handshake(read: Callable[[int], bytes], write: Callable[[bytes], None], keys: LinkKeys) -> Session:
    """Run the server's side over a blocking connection."""
    handshake = ServerHandshake(keys)
    write(handshake.challenge(_read_exactly(read, HELLO_BYTES)))
    return handshake.finish(_read_exactly(read, PROOF_BYTES))
