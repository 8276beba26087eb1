"""``TridentTopology``: where Trident streams begin, and ``build()``, which makes a runnable topology of them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from squall.model.components import Spout
from squall.model.fields import Fields
from squall.transactional.builder import TransactionalTopology
from squall.transactional.requests import REQUEST_FIELDS
from squall.transactional.spouts import is_transactional_spout
from squall.trident.graph import OPERATION, SPOUT, Node
from squall.trident.impl import IdentityMultiReducer, JoinerMultiReducer
from squall.trident.operation import MultiReducer
from squall.trident.processors import MultiReduce
from squall.trident.spouts import BatchSpout, spout_fields
from squall.trident.state import StateFactory
from squall.trident.stream import FieldsLike, Stream, TridentState, as_field_list, positions


class TridentTopology:
    """A Trident topology: streams from ``new_stream``, operations on them, then ``build()``.

    ``build()`` returns a transactional topology that ``LocalCluster.submit_topology``, ``TestCluster`` and
    ``squall run`` run like any other: each chain of operations between two repartitions becomes one bolt, and
    each batch's state updates commit in txid order, once."""

    def __init__(self) -> None:
        self._nodes: list[Node] = []
        self._states = 0

    # -- the graph ----------------------------------------------------------------------------------
    def add_node(self, kind: str, fields: Fields, parents: list[Node], name: str | None = None, **kw: Any) -> Node:
        node = Node(len(self._nodes), kind, fields, list(parents), name=name, **kw)
        for parent in parents:
            parent.children.append(node)
        self._nodes.append(node)
        return node

    def state_id(self) -> str:
        self._states += 1
        return f"state-{self._states}"

    # -- streams --------------------------------------------------------------------------------------
    def new_stream(self, txid: str, spout: Any) -> Stream:
        """A stream from ``spout``: a ``BatchSpout``, or a transactional or opaque partitioned spout. ``txid``
        names where the stream's progress is kept: a topology submitted again under it goes on from there."""
        if not isinstance(txid, str) or not txid:
            raise ValueError(f"new_stream: txid must be a non-empty string, got {txid!r}")
        if not (isinstance(spout, (BatchSpout, Spout)) or is_transactional_spout(spout)):
            raise TypeError(
                f"new_stream({txid!r}): {type(spout).__name__} is not a BatchSpout, a Spout, a "
                "PartitionedTransactionalSpout or an OpaquePartitionedTransactionalSpout"
            )
        if any(n.kind == SPOUT and n.function is None for n in self._nodes):
            raise ValueError(
                f"new_stream({txid!r}): this topology already has a stream; squall runs one new_stream per "
                "TridentTopology (merge or branch that stream instead)"
            )
        fields, _ = spout_fields(spout)
        return Stream(self, self.add_node(SPOUT, fields, [], spout=spout, txid=txid))

    def new_drpc_stream(self, function: str, drpc: Any = None) -> Stream:
        """A stream of ``function``'s DRPC requests, one field ``args``: each request is a batch of one tuple, and
        what the stream's last operation emits for it is the request's result (the JSON list of its tuples).
        ``drpc``: a ``LocalDRPC``."""
        if not isinstance(function, str) or not function:
            raise ValueError(f"new_drpc_stream: the function must be a non-empty string, got {function!r}")
        if any(n.function == function for n in self._nodes):
            raise ValueError(f"new_drpc_stream({function!r}): this topology already serves {function!r}")
        return Stream(self, self.add_node(SPOUT, REQUEST_FIELDS, [], spout=drpc, function=function))

    def new_static_state(self, factory: StateFactory) -> TridentState:
        """A state no stream updates (a lookup table, a database): each task that queries it makes its own."""
        return TridentState(self, None, self.state_id(), factory)

    def multi_reduce(
        self,
        streams: Sequence[Stream],
        reducer: MultiReducer,
        output_fields: FieldsLike,
        input_fields: Sequence[FieldsLike] | None = None,
    ) -> Stream:
        """Every stream's tuples (each projected to its ``input_fields``) into one ``MultiReducer``, per batch."""
        if not streams:
            raise ValueError("multi_reduce: no stream given")
        inputs = [s.fields if input_fields is None else as_field_list(input_fields[i]) for i, s in enumerate(streams)]
        projections = [(positions("multi_reduce", s.fields, f), f) for s, f in zip(streams, inputs, strict=True)]
        out = as_field_list(output_fields)
        node = self.add_node(OPERATION, out, [s._node for s in streams], name=streams[0]._name)
        node.processor = MultiReduce(node.id, f"{node.name or 'trident'} node {node.id}", reducer, projections, out)
        return Stream(self, node, streams[0]._name)

    def merge(self, *streams: Stream, output_fields: FieldsLike | None = None) -> Stream:
        """The tuples of every stream, as one; its fields are the first stream's (or ``output_fields``)."""
        if len(streams) == 1 and isinstance(streams[0], (list, tuple)):
            streams = tuple(streams[0])
        widths = {len(s.fields) for s in streams}
        if len(widths) != 1:
            raise ValueError(
                f"merge: the streams have different numbers of fields: {[list(s.fields) for s in streams]}"
            )
        out = streams[0].fields if output_fields is None else as_field_list(output_fields)
        return self.multi_reduce(streams, IdentityMultiReducer(), out)

    def join(
        self,
        stream1: Stream,
        fields1: FieldsLike,
        stream2: Stream,
        fields2: FieldsLike,
        out_fields: FieldsLike,
        join_type: str | Sequence[str] = "inner",
    ) -> Stream:
        """Per batch, the tuples of the two streams with equal join fields, side by side: the join fields, then
        the first stream's other fields, then the second's. ``join_type``: ``"inner"``, ``"outer"``, or one per
        stream (an outer stream gives Nones where it has no tuple for a key)."""
        keys = [as_field_list(fields1), as_field_list(fields2)]
        if len(keys[0]) != len(keys[1]):
            raise ValueError(f"join: the join fields {list(keys[0])} and {list(keys[1])} differ in number")
        streams = [stream1, stream2]
        types = [join_type, join_type] if isinstance(join_type, str) else list(join_type)
        for t in types:
            if t not in ("inner", "outer"):
                raise ValueError(f"join: join_type {t!r} is not 'inner' or 'outer'")
        inputs = [Fields(*k, *[f for f in s.fields if f not in k]) for s, k in zip(streams, keys, strict=True)]
        out = as_field_list(out_fields)
        width = len(keys[0]) + sum(len(i) - len(keys[0]) for i in inputs)
        if len(out) != width:
            raise ValueError(f"join: {len(out)} output fields {list(out)} for {width} joined values")
        moved = [s.partition_by(k) for s, k in zip(streams, keys, strict=True)]
        reducer = JoinerMultiReducer(types, len(keys[0]), [len(i) - len(keys[0]) for i in inputs])
        return self.multi_reduce(moved, reducer, out, inputs)

    # -- building ------------------------------------------------------------------------------------
    def build(self, conf: Mapping[str, Any] | None = None) -> TransactionalTopology:
        from squall.trident.planner import plan

        return plan(self._nodes, conf)
