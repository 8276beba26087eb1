"""A transactional word count whose commits take a while (a window to be killed in)."""

from tx_components import CountCommitter, PartialWordCount, word_data

from squall.transactional import MemoryTransactionalSpout, TransactionalTopologyBuilder

CONF = {"topology.max.spout.pending": 3}


def build_topology(conf):
    data = word_data(3, int(conf["test.per_partition"]), seed=int(conf["test.seed"]))
    b = TransactionalTopologyBuilder("restart", "spout", MemoryTransactionalSpout(data, ["word"], 10), 2)
    b.set_bolt("partial", PartialWordCount(), 2).fields_grouping("spout", ["word"])
    b.set_bolt(
        "commit", CountCommitter(conf["test.db"], pause=0.3, marker_dir=conf["test.markers"]), 2
    ).fields_grouping("partial", ["word"])
    return b.build()
