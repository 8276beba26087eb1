"""What keeps a run's links and its files trustworthy.

* ``handshake``: mutual challenge-response over a run's secret, and the sealed frames that follow it
  (AES-256-GCM when the run encrypts its links);
* ``sealing``: signed (or encrypted) blobs for everything squall writes to disk and reads back;
* ``keys``: where a run's keys come from, and whether Spark's own security settings ask for them.

Nothing here opens a socket or a file: the runtime does the I/O around it.
"""

from squall.security.handshake import HandshakeFailed, LinkKeys, Session
from squall.security.keys import RunKeys, checkpoint_key, run_keys
from squall.security.sealing import BlobSealer, TamperedBlobError

__all__ = [
    "BlobSealer",
    "HandshakeFailed",
    "LinkKeys",
    "RunKeys",
    "Session",
    "TamperedBlobError",
    "checkpoint_key",
    "run_keys",
]
