"""Base classes for the user's spouts and bolts, and the rules their methods are called by.

Subclasses need not call ``__init__``. ``outputs`` declares the output streams:
a sequence of field names for the ``default`` stream, or a mapping of stream id
to field names.

**Instances.** ``__init__`` runs where the topology is declared. Each task then
gets its own instance, copied from the declared one: unpickled on the Spark
worker that hosts the task (a spout under ``TestCluster`` is a deep copy in the
test's process). Make connections, files, locks and threads in ``open`` or
``prepare``, which run where the task runs, not in ``__init__``.

**Threads.** A worker (one long-lived Spark task) runs every bolt task it
hosts, and under ``LocalCluster`` and ``squall run`` its spout and acker tasks
too, on one thread. A task's methods are never called concurrently, always
from that thread, so a task needs no lock for its own attributes; but a method
that blocks holds up every task of its worker. Under ``TestCluster`` the spout
and acker tasks run on one more worker, a thread of the test's process, which
serves the waves the test runs (``wait_idle``, ``advance_time``): read a
spout's attributes between them. ``squall.transactional.BatchBolt`` runs
otherwise: see its docstring.

The collectors each method is handed are described by the protocols below;
the runtime's classes implement them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from squall.model.errors import InvalidTopologyError
from squall.model.fields import Fields, as_fields

if TYPE_CHECKING:  # for annotations only
    from squall.model.state import KeyValueState
    from squall.model.topology import TopologyContext
    from squall.model.tuple import Tuple

DEFAULT_STREAM = "default"

OutputsDeclaration = Sequence[str] | Mapping[str, Sequence[str]] | Fields


class SpoutOutputCollector(Protocol):
    """What a spout task emits into: Storm's ``SpoutOutputCollector``, handed to ``Spout.open`` for the task's life.

    Use it from the spout's own methods, on the task's thread: it is not thread-safe. Emit from ``next_tuple``.
    An emit with a ``msg_id`` starts a tuple tree that ends in one ``ack(msg_id)`` or ``fail(msg_id)`` on this
    task; one without is not tracked. What the task emits leaves when the run's round of ``next_tuple`` calls it
    came from ends (a wave's first calls, or the calls made at the worker's idle moments while that wave is
    open), to each target task in emission order. An emit that does not match the declared stream and fields raises
    ``EmitError``, and a value that cannot be pickled ``SerializationError``, each naming the component, the
    stream and what is wrong.
    """

    emit_budget: int
    """How many tuples the current ``next_tuple`` call may still emit: the task's share of the wave left, and no
    more than ``topology.max.spout.pending`` less its trees pending. Not enforced: a call that emits more ends the
    task's calls for the wave, and may take it past ``topology.max.spout.pending``."""
    may_wait: bool
    """False in a run, where ``next_tuple`` must return at once; a spout that can wait for input (a broker's poll
    timeout) asks this before it does."""

    def emit(self, values: Sequence[Any], msg_id: Any = None, stream: str = DEFAULT_STREAM) -> list[int]:
        """Emit a spout tuple on ``stream``; with a ``msg_id`` it is tracked and acked or failed later. Returns
        the target task ids (none when no bolt reads the stream: a tracked tuple is then acked at once)."""
        ...

    def emit_many(
        self, rows: Sequence[Sequence[Any]], msg_ids: Sequence[Any] | None = None, stream: str = DEFAULT_STREAM
    ) -> None:
        """``emit`` of each of ``rows``, with ``msg_ids`` (one per row) when they are tracked, in one call."""
        ...

    def emit_direct(self, task: int, values: Sequence[Any], msg_id: Any = None, stream: str = DEFAULT_STREAM) -> None:
        """Emit to ``task``, a task of a bolt that reads ``stream`` with ``direct_grouping``."""
        ...

    def report_error(self, error: BaseException) -> None:
        """Count and log ``error`` among the run's errors (the web UI's and ``squall run``'s), failing nothing."""
        ...

    def report_malformed(self, what: str) -> None:
        """A message the spout set aside instead of emitting: counted in the run's stats and logged."""
        ...


class OutputCollector(Protocol):
    """What a bolt task emits into and acks with: Storm's ``OutputCollector``, handed to ``Bolt.prepare`` for the
    task's life. Use it on the task's thread, from ``execute`` (or from ``prepare`` and ``cleanup``)."""

    def emit(
        self, values: Sequence[Any], anchors: Tuple | Iterable[Tuple] | None = None, stream: str = DEFAULT_STREAM
    ) -> list[int]:
        """Emit ``values`` on ``stream``, anchored to ``anchors`` (an input tuple, or several: multi-anchoring;
        None for a tuple outside any tree); returns the target task ids."""
        ...

    def emit_direct(
        self,
        task: int,
        values: Sequence[Any],
        anchors: Tuple | Iterable[Tuple] | None = None,
        stream: str = DEFAULT_STREAM,
    ) -> None:
        """Emit to ``task``, a task of a bolt that reads ``stream`` with ``direct_grouping``, anchored as ``emit``."""
        ...

    def ack(self, tup: Tuple) -> None:
        """The task is done with ``tup``: ack each input once, after emitting what is anchored to it."""
        ...

    def fail(self, tup: Tuple) -> None:
        """Fail ``tup``'s trees: the spout tuple each descends from fails (``Spout.fail``), whatever else acks."""
        ...

    def reset_timeout(self, tup: Tuple) -> None:
        """Restart the timeout of ``tup``'s trees: for a tuple the task holds long."""
        ...

    def report_error(self, error: BaseException) -> None:
        """Count ``error`` among the run's errors, with the component and the task; it fails nothing."""
        ...


class BasicOutputCollector(Protocol):
    """What a ``BasicBolt``'s ``execute`` emits into: emits are anchored to the tuple being executed, which the
    runtime acks when ``execute`` returns (or fails if it raises). Use it only during that call."""

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> list[int]:
        """``OutputCollector.emit``, anchored to the input; returns the target task ids."""
        ...

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> None:
        """``OutputCollector.emit_direct``, anchored to the input."""
        ...

    def reset_timeout(self, tup: Tuple) -> None:
        """``OutputCollector.reset_timeout``."""
        ...

    def report_error(self, error: BaseException) -> None:
        """``OutputCollector.report_error``."""
        ...


class Spout:
    """A source of tuples: Storm's ``ISpout``.

    Each spout task runs on a Spark worker under ``LocalCluster`` and ``squall run``, and in the test's process
    under ``TestCluster``. Every call a task gets, from ``open`` to ``close``, is made on one thread: on a worker,
    the thread that also runs that worker's bolt and acker tasks; under ``TestCluster``, the thread of the worker in
    the test's process, which serves the waves the test runs. None of the calls should block: ``next_tuple``
    returns at once when there is nothing to emit, and the run paces an idle topology itself, with growing pauses
    between waves, as Storm's wait strategy does.

    What is guaranteed: every tuple emitted with a ``msg_id`` ends in exactly one ``ack(msg_id)`` or
    ``fail(msg_id)`` on the task instance that emitted it. If that instance is lost with its worker's process, a new
    instance of the task is opened, and the source must redeliver what the old one had not acked, as a reliable
    source does.
    """

    outputs: OutputsDeclaration = ()

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        """Called once per task instance, before any other call, when the run first asks the task for tuples.

        ``conf`` is the topology's config with the component's own over it; ``context`` says which task this is;
        ``collector`` is the task's for its whole life: keep it. Connect to the source here. What ``open``
        raises stops the topology, naming the component and the task (on a worker, once Spark's retries of the
        worker fail too).
        """

    def next_tuple(self) -> None:
        """Emit the next tuples through the collector, or return at once if there are none; never wait.

        Called repeatedly when a wave starts, until the task has emitted its share of the wave, has
        ``topology.max.spout.pending`` trees pending, or emits nothing in a call. When it ran dry before its share
        was emitted, the wave stays open (``squall.wave.open.ms``, 50) and the calls go on the same way every
        ``squall.wave.open.call.ms`` (4) whenever the worker has nothing else to do, until the share is emitted, the
        time is up, or it has emitted nothing for ``squall.wave.open.dry.ms`` (10): a message the source gets
        between waves is read within a few milliseconds. Not called while the spout is deactivated. A call may emit
        any number of tuples; ``collector.emit_budget`` says how many it may still emit. What it raises is logged
        and counted, and the task is asked again at its next round of calls; the same error
        ``squall.max.repeated.errors`` times in a row with no emit in between stops the topology.
        """

    def ack(self, msg_id: Any) -> None:
        """The tuple tree of ``msg_id`` completed: every tuple in it was acked.

        It comes as soon as the tree's last tuple was acked and the acks reached the acker task, which runs in
        this task's process: without waiting for the wave to end. For a tree that went through a
        ``StatefulBolt``, it waits for the checkpoint holding that bolt's state. With ``topology.acker.executors``
        0, or when no bolt reads the stream, it comes at once, after the ``next_tuple`` calls that emitted it.
        Called between ``next_tuple`` calls, on the same thread. What it raises is logged and counted.
        """

    def fail(self, msg_id: Any) -> None:
        """The tuple tree of ``msg_id`` failed: replay the message if the source is reliable.

        Called when a bolt fails a tuple of the tree (or raises in ``execute``); when the tree times out
        (between one and two ``topology.message.timeout.secs`` after the emit, unless a bolt called
        ``reset_timeout``); under ``LocalCluster`` and ``squall run``, when the run restarts its workers after
        one was lost (the trees pending on the task fail back); and when a kill with a wait ends with trees
        still pending. An explicit fail arrives as an ack does. Called between
        ``next_tuple`` calls, on the same thread. To replay, keep the message and emit it again from
        ``next_tuple``, where the budgets are counted. What it raises is logged and counted.
        """

    def activate(self) -> None:
        """The topology (re)starts calling ``next_tuple`` after a deactivation; called on the task's thread."""

    def deactivate(self) -> None:
        """``next_tuple`` will not be called until ``activate``; acks and fails still arrive.

        Called on the task's thread before its next call, after ``squall deactivate``, and at the start of a
        kill with a wait (``squall kill --wait``, Ctrl-C under ``squall run``) or a rebalance.
        """

    def close(self) -> None:
        """Called once, on the task's thread, as the task stops: release what ``open`` made.

        It comes as the topology stops (after a kill's wait has failed the trees still pending back to the
        spout), and when a restart changes which spout tasks the task's worker hosts. It does not come when the
        task's process dies. No call follows it. What it raises is logged.
        """


class Bolt:
    """A processing step that acks, fails and anchors explicitly: Storm's ``IRichBolt``.

    Each task runs on a Spark worker, on the one thread that runs every task of that worker (see the module's
    docstring): ``execute`` should not block for long, since the worker's other tasks wait meanwhile.

    A task's state is its attributes. They are saved from time to time (about every ``squall.snapshot.interval.ms``
    under ``LocalCluster`` and ``squall run``; after each wave in which the task executed something under
    ``TestCluster``), and a task that restarts after a lost worker is rebuilt: a new instance, ``prepare``, then the
    saved attributes laid over it; the tuples since are delivered again. Attributes that cannot be pickled (a
    socket, a connection, a lock) are left out of the save and must be made by ``prepare``. A bolt whose class sets
    ``task_snapshots = False`` is not saved: it restarts from ``prepare`` alone, as a Storm bolt does.
    """

    outputs: OutputsDeclaration = ()

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        """Called once per task instance, before its first ``execute``, on the worker that runs the task.

        That is at the start of the run and whenever the task is rebuilt after a restart (a worker process that
        still holds the task's instance at the very state it restarts from reuses it, with no new ``prepare``).
        ``conf`` is the topology's config with the component's own over it; keep ``collector``, the task's for
        its whole life. What ``prepare`` raises on every retry of the worker stops the topology, naming the
        component and the task.
        """

    def execute(self, tup: Tuple) -> None:
        """Process one input tuple: emit through the collector, anchored to ``tup``, then ack or fail it.

        Called once per tuple delivered to the task, on the worker's thread. Tuples from one upstream task
        arrive in the order it emitted them. With ``topology.tick.tuple.freq.secs`` set (for the topology or the
        component), tick tuples arrive here too: ``tup.is_tick``. Every input should end in one
        ``collector.ack`` or ``collector.fail``, in this call or a later one; one never acked times out (with
        message timeouts on) and its spout tuple fails. Emits leave in batches, at the latest when the task ends
        its wave, and acks when it ends the wave.

        Raising ``FailedException`` fails ``tup``; any other exception fails it too, is logged with the
        component and the task, and the topology goes on, unless the same error comes
        ``squall.max.repeated.errors`` times in a row with no tuple going through in between.
        """
        raise NotImplementedError(f"{type(self).__name__} must define execute(tup)")

    def cleanup(self) -> None:
        """Not called by squall, as Storm does not guarantee it on a cluster: a task may end with its process.

        Do not rely on it to flush or release anything.
        """


class StatefulBolt(Bolt):
    """A bolt whose state survives workers and waves: Storm's ``IStatefulBolt``.

    ``init_state(state)`` is called once per task instance, after ``prepare``, with the task's ``KeyValueState`` as
    the task restarts from it: empty on a first run, else as of the last complete checkpoint or the snapshot a
    restarted task is rebuilt from. Keep in it everything the task must not lose; its other attributes are not
    saved, and are made again by ``prepare`` wherever the task is rebuilt.

    ``execute``, ``ack`` and anchoring work as for ``Bolt``, on the same thread, but the acks of a stateful task are
    held until the checkpoint that holds its state as of their wave is complete: its spouts see them only then.
    """

    def init_state(self, state: KeyValueState) -> None:
        """Called once per task instance, after ``prepare`` and before the first ``execute``: keep ``state``.

        What it raises stops the topology, as ``prepare``'s does.
        """
        raise NotImplementedError(f"{type(self).__name__} must define init_state(state)")

    def pre_commit(self, checkpoint_id: int) -> None:
        """Called before the task's state is saved for checkpoint ``checkpoint_id``.

        That is at the end of the wave that carries the checkpoint (one every
        ``topology.state.checkpoint.interval.ms``), after that wave's last ``execute``, on the task's thread:
        put into the state anything held elsewhere. What it raises is logged and reported, and the checkpoint
        goes on.
        """


class BasicBolt:
    """A bolt whose emits are anchored to the input and whose input is acked on return: Storm's ``IBasicBolt``.

    Raising ``FailedException`` fails the input instead; any other exception fails it too and is logged. It runs as
    a ``Bolt`` does: one thread per worker, ``prepare`` per task instance, its attributes saved and restored.
    """

    outputs: OutputsDeclaration = ()

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        """Called once per task instance, before its first ``execute``, as ``Bolt.prepare`` is."""

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        """Process one input tuple; what ``collector`` emits is anchored to ``tup``.

        Called once per tuple, on the worker's thread, in each upstream task's emission order (and for tick
        tuples, as ``Bolt.execute``). ``tup`` is acked after this returns (with the rest of its batch), or
        failed if this raises. ``collector`` anchors to the tuple being executed: use it only during the call.
        """
        raise NotImplementedError(f"{type(self).__name__} must define execute(tup, collector)")

    def cleanup(self) -> None:
        """Not called by squall, as ``Bolt.cleanup``."""


def declared_streams(component_id: str, component: Any) -> dict[str, Fields]:
    """The streams a component declares, as ``{stream_id: Fields}``."""
    outputs = getattr(component, "outputs", ())
    try:
        if isinstance(outputs, Mapping):
            streams = {str(stream): as_fields(names) for stream, names in outputs.items()}
        else:
            streams = {DEFAULT_STREAM: as_fields(outputs)} if len(outputs) else {}
    except (TypeError, ValueError) as exc:
        raise InvalidTopologyError(f"component {component_id!r} declares bad outputs: {exc}") from None
    return streams
