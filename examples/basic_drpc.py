"""storm-starter's BasicDRPCTopology: DRPC over one bolt with LinearDRPCTopologyBuilder.

    request [id, args] --> exclaim (3 tasks) --> [id, args + "!"] --> the caller

Run a DRPC server, then the topology, then ask it:

    squall drpc &
    squall run examples/basic_drpc.py --idle-secs 0 &
    python -c "from squall.drpc import DRPCClient; print(DRPCClient('127.0.0.1', 3772).execute('exclamation', 'hello'))"
"""

from __future__ import annotations

from squall import BasicBolt
from squall.drpc import LinearDRPCTopologyBuilder

NAME = "basic-drpc"
CONF = {"drpc.servers": ["127.0.0.1"], "drpc.port": 3772}  # where squall drpc runs


class ExclaimBolt(BasicBolt):
    outputs = ("id", "result")

    def execute(self, tup, collector):
        collector.emit([tup[0], tup[1] + "!"])


def build_topology(conf: dict):
    builder = LinearDRPCTopologyBuilder("exclamation")
    builder.add_bolt(ExclaimBolt(), 3)
    return builder.create_remote_topology()
