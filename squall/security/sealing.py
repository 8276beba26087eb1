"""Blobs that squall writes and later reads back and unpickles: bolt tasks' snapshots, spout logs, stateful
checkpoints and their parts, state blobs.

Each is sealed under the checkpoint key before it is written, and opened before anything of it is unpickled:

* signed:    ``SQS1 | HMAC-SHA256(signing key, data) | data``
* encrypted: ``SQE1 | salt (16 bytes) | AES-256-GCM(the blob's key, data)``

The signing and encryption keys are derived from the checkpoint key (HKDF-SHA256), one for each use; each
encrypted blob has a key of its own, HMAC-SHA256(encryption key, salt), under a random salt. A blob
whose tag does not match, or that carries neither header, raises ``TamperedBlobError`` naming where it was
read: whoever can write to the checkpoint directory but does not hold the key can make squall refuse a blob,
never run code. A blob is bound to the key, not to its path: one sealed blob moved in place of another is
opened (see docs/operations.md, "Security").
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

SIGNED = b"SQS1"
ENCRYPTED = b"SQE1"
TAG_BYTES = 32
SALT_BYTES = 16
NONCE = bytes(12)  # each blob's key encrypts only it


class TamperedBlobError(ValueError):
    """A blob that was not sealed with this run's checkpoint key: it is refused, and nothing of it unpickled."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(
            f"{where}: {why}; refused before unpickling (is squall.checkpoint.key the key it was written with?)"
        )
        self.where = where


def _derive(key: bytes, use: bytes) -> bytes:
    return HKDF(hashes.SHA256(), 32, salt=None, info=b"squall checkpoint " + use).derive(key)


class BlobSealer:
    """Seals and opens blobs under one checkpoint key; ``encrypt`` seals new blobs encrypted (either kind opens).
    Its ``repr`` never shows the key."""

    __slots__ = ("_encryption", "_signing", "encrypt", "fingerprint")

    def __init__(self, key: bytes, encrypt: bool = False) -> None:
        if len(key) < 16:
            raise ValueError("a checkpoint key needs at least 16 bytes")
        self._signing = _derive(key, b"signing")
        self._encryption = _derive(key, b"encryption")
        self.encrypt = encrypt
        # Tells sealers of different keys apart, revealing nothing of the key: a MAC of a fixed text under it.
        self.fingerprint = hmac.new(self._signing, b"fingerprint", hashlib.sha256).hexdigest()[:16] + (
            "e" if encrypt else "s"
        )

    def _blob_cipher(self, salt: bytes) -> AESGCM:
        return AESGCM(hmac.new(self._encryption, salt, hashlib.sha256).digest())

    def __repr__(self) -> str:
        return f"BlobSealer(encrypt={self.encrypt})"

    def __reduce__(self):
        raise TypeError("a BlobSealer holds the checkpoint key: it is never pickled")

    def signing_only(self) -> BlobSealer:
        """A sealer of the same key that signs and never encrypts: the same data always seals to the same bytes."""
        if not self.encrypt:
            return self
        twin = object.__new__(BlobSealer)
        twin._signing, twin._encryption, twin.encrypt = self._signing, self._encryption, False
        twin.fingerprint = self.fingerprint[:-1] + "s"
        return twin

    def seal_parts(self, data: bytes | bytearray | memoryview) -> tuple[bytes, bytes | bytearray | memoryview]:
        """The blob as two pieces to write one after the other (signed: the header, then ``data`` itself)."""
        if self.encrypt:
            salt = secrets.token_bytes(SALT_BYTES)
            return ENCRYPTED + salt, self._blob_cipher(salt).encrypt(NONCE, bytes(data), ENCRYPTED)
        return SIGNED + hmac.new(self._signing, data, hashlib.sha256).digest(), data

    def seal(self, data: bytes | bytearray | memoryview) -> bytes:
        header, body = self.seal_parts(data)
        return header + bytes(body)

    def open(self, blob: bytes | bytearray | memoryview, where: str) -> memoryview:
        """The data sealed in ``blob`` (read from ``where``, which errors name)."""
        view = memoryview(blob)
        magic = bytes(view[:4])
        if magic == SIGNED:
            tag, data = view[4 : 4 + TAG_BYTES], view[4 + TAG_BYTES :]
            if len(tag) == TAG_BYTES and hmac.compare_digest(
                tag, hmac.new(self._signing, data, hashlib.sha256).digest()
            ):
                return data
            raise TamperedBlobError(where, "its signature does not match the checkpoint key")
        if magic == ENCRYPTED:
            salt, sealed = bytes(view[4 : 4 + SALT_BYTES]), bytes(view[4 + SALT_BYTES :])
            try:
                return memoryview(self._blob_cipher(salt).decrypt(NONCE, sealed, ENCRYPTED))
            except InvalidTag:
                raise TamperedBlobError(where, "it does not decrypt under the checkpoint key") from None
        raise TamperedBlobError(where, "it is not a blob squall sealed (no signature)")
