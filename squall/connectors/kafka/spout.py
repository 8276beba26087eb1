"""``KafkaSpout``: storm-kafka-client's spout, on confluent-kafka.

Guarantee (``AT_LEAST_ONCE``, the default): every record is emitted with its ``(topic, partition, offset)`` as
its msg id, and a partition's offset is committed only past its contiguous acked prefix, as Storm's
``OffsetManager`` commits. A failed record waits out its backoff and is emitted again; after ``max_retries`` it
is given up (logged, counted) and its offset may be committed. After a restart, consumption resumes from the
committed offsets: nothing acked is lost and nothing unacked is skipped; records emitted but not yet committed
when a spout dies are emitted again (at-least-once).

``AT_MOST_ONCE`` commits each poll's offsets before emitting its records, unanchored; ``NO_GUARANTEE`` emits
unanchored and commits the consumer's position every ``offset_commit_period_ms``.

Partitions are read by the spout tasks with one consumer each, manually assigned: the partitions of the
subscribed topics, sorted, go round-robin over the tasks (Storm's ``RoundRobinManualPartitioner``), looked up
again every ``partition_refresh_period_ms`` so that new partitions and topics are picked up. The tasks run
where squall runs spouts: on the executors under ``LocalCluster`` and ``squall run``.

A record the translator cannot decode is malformed: logged, counted, acked (it never blocks its partition),
and copied to ``dead_letter_topic`` if one is set. Under ``AT_LEAST_ONCE`` such a record is acked only once Kafka
confirms its copy (the dead-letter producer's delivery report): a copy that fails is an error, reported and
counted, and is sent again after the ``retry`` backoff, its offset held back meanwhile, as a failed tuple's is; a
copy still unconfirmed when the spout closes (after a flush of up to ``DEAD_LETTER_FLUSH_SECS``) leaves its
record uncommitted, to be read, and copied, again. Kafka Connect's dead-letter queue holds offsets the same way.

Every Kafka client the spout makes gets the user's settings: its consumer ``consumer_config`` over config
``squall.kafka.client.config``; its dead-letter producer the connection's settings of both (security.protocol,
sasl.*, ssl.*: ``client.connection_config``) under ``dead_letter_config``.
"""

from __future__ import annotations

import enum
import json
import logging
import re
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from squall.connectors.kafka import client
from squall.connectors.kafka.offsets import OffsetManager, RetryExponentialBackoff, RetrySchedule
from squall.connectors.queue import MalformedMessage, decode_values
from squall.model.components import DEFAULT_STREAM, Spout
from squall.model.config import SQUALL_RUN_ID, TOPOLOGY_NAME
from squall.model.fields import Fields, as_fields
from squall.time import now

log = logging.getLogger("squall.connectors.kafka")

__all__ = [
    "FirstPollOffsetStrategy",
    "JsonTranslator",
    "KafkaSpout",
    "ProcessingGuarantee",
    "RecordTranslator",
    "Routed",
]


class FirstPollOffsetStrategy(enum.Enum):
    """Where a partition is first read from, as storm-kafka-client's strategy of the same name.

    ``EARLIEST``/``LATEST``: the log's start or end, whatever was committed, unless this submission of the
    topology committed it (a spout task restarted within the run resumes). ``UNCOMMITTED_EARLIEST`` (the
    default)/``UNCOMMITTED_LATEST``: the group's committed offset, else the start or end."""

    EARLIEST = "EARLIEST"
    LATEST = "LATEST"
    UNCOMMITTED_EARLIEST = "UNCOMMITTED_EARLIEST"
    UNCOMMITTED_LATEST = "UNCOMMITTED_LATEST"


class ProcessingGuarantee(enum.Enum):
    AT_LEAST_ONCE = "AT_LEAST_ONCE"
    AT_MOST_ONCE = "AT_MOST_ONCE"
    NO_GUARANTEE = "NO_GUARANTEE"


class Routed(tuple):
    """A translator's result for a stream other than ``default``: ``Routed((stream, values))``."""

    @property
    def stream(self) -> str:
        return self[0]

    @property
    def values(self) -> Sequence[Any]:
        return self[1]


class RecordTranslator:
    """Storm's default translator: the fields ``topic, partition, offset, key, value``, key and value as text.

    Subclass it (or pass a function to ``KafkaSpout(translator=...)``) to map a record to other values: return
    the values for the ``default`` stream, ``Routed((stream, values))`` for another, or None to emit nothing.
    Raise ``MalformedMessage`` (or ``ValueError``) for a record that cannot be decoded."""

    outputs: Mapping[str, Sequence[str]] = {DEFAULT_STREAM: ("topic", "partition", "offset", "key", "value")}

    def __call__(self, record: Any) -> Sequence[Any] | Routed | None:
        key, value = record.key(), record.value()
        return (
            record.topic(),
            record.partition(),
            record.offset(),
            None if key is None else key.decode(),
            None if value is None else value.decode(),
        )


_scan = json.JSONDecoder().scan_once


class JsonTranslator(RecordTranslator):
    """A record's value is JSON: a list of values, an object keyed by field, or a lone value for one field."""

    def __init__(self, fields: Sequence[str] | Fields, stream: str = DEFAULT_STREAM) -> None:
        self.fields, self.stream = as_fields(fields), stream
        self.outputs = {stream: tuple(self.fields)}
        self._width = len(self.fields)

    def __call__(self, record: Any) -> Sequence[Any] | Routed | None:
        raw = record.value()
        if raw is None:
            return None  # a tombstone
        text = raw.decode()
        try:
            payload, end = _scan(text, 0)  # the C scanner itself: no whitespace regex around it
        except (ValueError, StopIteration):
            payload, end = None, -1
        if type(payload) is list and len(payload) == self._width and end == len(text):  # the common case
            values: Sequence[Any] = payload
        else:
            values = decode_values(text, self.fields)  # the other shapes, and the error that names the problem
        return values if self.stream == DEFAULT_STREAM else Routed((self.stream, values))


class _FunctionTranslator(RecordTranslator):
    def __init__(self, function: Callable[[Any], Any], outputs: Mapping[str, Sequence[str]]) -> None:
        self.function, self.outputs = function, outputs

    def __call__(self, record: Any) -> Any:
        return self.function(record)


MsgId = tuple  # (topic, partition, offset)


class _Chunk:
    """Consecutive polled records of one partition for one stream, translated, not all emitted yet."""

    __slots__ = ("offsets", "partition", "rows", "start", "stream", "topic")

    def __init__(self, topic: str, partition: int, stream: str, tracked: bool) -> None:
        self.topic, self.partition, self.stream = topic, partition, stream
        self.rows: list[Sequence[Any]] = []
        self.offsets: list[int] | None = [] if tracked else None  # the rows' offsets, when they are tracked
        self.start = 0  # rows before it are emitted

    @property
    def done(self) -> bool:
        return self.start >= len(self.rows)

    def take(self, most: int) -> tuple[list[Sequence[Any]], list[MsgId] | None]:
        """The next ``most`` rows (at least one), and their msg ids when tracked."""
        start = self.start
        end = self.start = min(start + max(1, most), len(self.rows))
        rows = self.rows if start == 0 and end == len(self.rows) else self.rows[start:end]
        if self.offsets is None:
            return rows, None
        topic, partition = self.topic, self.partition
        return rows, [(topic, partition, offset) for offset in self.offsets[start:end]]


REFRESH_TIMEOUT = 1.0  # seconds a partition refresh may wait for metadata: the spout's thread must not stall
DEAD_LETTER_FLUSH_SECS = 10.0  # at close, how long the dead-letter copies in flight get to be confirmed


class KafkaSpout(Spout):
    """Reads ``topics`` (a list of names, or a regex pattern) in consumer group ``group_id``.

    ``bootstrap_servers`` defaults to config ``squall.kafka.bootstrap.servers``. ``translator`` maps a record to
    a tuple (default: ``RecordTranslator``); a plain function needs ``fields`` (or ``streams``) declared.
    ``consumer_config`` adds librdkafka settings (``max.poll.records`` has no equivalent: ``poll_records``),
    security settings included (``security.protocol``, ``sasl.*``, ``ssl.*``), over config
    ``squall.kafka.client.config``. ``dead_letter_config`` adds producer settings for the dead-letter copies
    (``message.timeout.ms``...), over the connection's settings of those two."""

    def __init__(
        self,
        topics: Sequence[str] | str | re.Pattern,
        bootstrap_servers: str | None = None,
        group_id: str = "squall",
        *,
        first_poll_offset_strategy: FirstPollOffsetStrategy = FirstPollOffsetStrategy.UNCOMMITTED_EARLIEST,
        processing_guarantee: ProcessingGuarantee = ProcessingGuarantee.AT_LEAST_ONCE,
        offset_commit_period_ms: int = 30_000,
        max_uncommitted_offsets: int = 10_000_000,
        poll_timeout_ms: int = 200,
        poll_records: int = 500,
        partition_refresh_period_ms: int = 2_000,
        translator: RecordTranslator | Callable[[Any], Any] | None = None,
        fields: Sequence[str] | Fields | None = None,
        streams: Mapping[str, Sequence[str]] | None = None,
        emit_null_tuples: bool = False,
        retry: RetryExponentialBackoff | None = None,
        dead_letter_topic: str | None = None,
        consumer_config: Mapping[str, Any] | None = None,
        dead_letter_config: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(topics, str):
            topics = [topics]
        if not isinstance(topics, re.Pattern) and (not topics or not all(isinstance(t, str) and t for t in topics)):
            raise ValueError(f"KafkaSpout topics must be topic names or a regex pattern, got {topics!r}")
        self.topics = topics if isinstance(topics, re.Pattern) else tuple(topics)
        self.bootstrap_servers, self.group_id = bootstrap_servers, group_id
        self.first_poll_offset_strategy = FirstPollOffsetStrategy(first_poll_offset_strategy)
        self.processing_guarantee = ProcessingGuarantee(processing_guarantee)
        for name, value, low in (
            ("offset_commit_period_ms", offset_commit_period_ms, 1),
            ("max_uncommitted_offsets", max_uncommitted_offsets, 1),
            ("poll_timeout_ms", poll_timeout_ms, 0),
            ("poll_records", poll_records, 1),
            ("partition_refresh_period_ms", partition_refresh_period_ms, 1),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"KafkaSpout {name} must be an int >= {low}, got {value!r}")
        self.offset_commit_period_ms, self.max_uncommitted_offsets = offset_commit_period_ms, max_uncommitted_offsets
        self.poll_timeout_ms, self.poll_records = poll_timeout_ms, poll_records
        self.partition_refresh_period_ms = partition_refresh_period_ms
        if translator is None:
            translator = JsonTranslator(fields) if fields is not None else RecordTranslator()
        elif not isinstance(translator, RecordTranslator):
            if fields is None and streams is None:
                raise ValueError("KafkaSpout: a translator function needs the fields (or streams) it emits declared")
            translator = _FunctionTranslator(translator, streams or {DEFAULT_STREAM: tuple(as_fields(fields))})
        self.translator = translator
        self.outputs = {stream: tuple(names) for stream, names in translator.outputs.items()}
        self.emit_null_tuples = emit_null_tuples
        self.retry = retry or RetryExponentialBackoff()
        self.dead_letter_topic = dead_letter_topic
        self.consumer_config = dict(consumer_config or {})
        self.dead_letter_config = dict(dead_letter_config or {})
        self.given_up = 0  # records past their maximum retries, in this task

    # -- lifecycle -------------------------------------------------------------
    def open(self, conf, context, collector) -> None:
        self._collector = collector
        self._name = f"spout {context.component_id} task {context.task_id}"
        self._task_index, self._task_count = context.task_index, len(context.this_component_tasks)
        self._servers = client.servers_from(self.bootstrap_servers, conf, self._name)
        self._commit_metadata = json.dumps(
            {"topology": conf.get(TOPOLOGY_NAME), "run": conf.get(SQUALL_RUN_ID), "task": context.task_id}
        )
        self._run = conf.get(SQUALL_RUN_ID)
        shared = client.topology_client_config(conf)
        self._consumer = client.consumer(
            self._servers, self.group_id, {**shared, "on_commit": self._committed, **self.consumer_config}
        )
        client.check_reachable(self._consumer, self._servers, self._name)
        self._dead_letter_settings = {
            **client.connection_config(shared),
            **client.connection_config(self.consumer_config),
            **self.dead_letter_config,
        }
        self._producer = None  # for the dead-letter topic, made on first use
        self._dead_lettering: dict[MsgId, tuple[Any, Any, dict]] = {}  # copies not yet confirmed: value, key, headers
        self._dead_letter_reports: list[tuple[MsgId, Any]] = []  # delivery reports not yet handled: (msg id, error)
        self._offsets: dict[tuple[str, int], OffsetManager] = {}  # the partitions this task reads
        self._paused: set[tuple[str, int]] = set()
        self._unsent: dict[tuple[str, int], int] = {}  # offsets whose commit failed, to commit again
        self._ready: deque[_Chunk] = deque()  # polled and translated, not emitted yet, in poll order
        self._in_flight: dict[MsgId, tuple[str, Sequence[Any]]] = {}  # emitted, not acked: (stream, values)
        self._retries = RetrySchedule(self.retry)
        self._null_values = (None,) * len(self.outputs.get(DEFAULT_STREAM, ()))  # a null tuple, emitted if asked
        self._due: deque[MsgId] = deque()  # failed records whose backoff has passed, to emit again
        self._last_commit = self._last_refresh = time.monotonic()
        self._active = True
        self._refresh_assignment()

    def activate(self) -> None:
        self._active = True

    def deactivate(self) -> None:
        """Acks and fails still arrive; what is committable is committed."""
        self._active = False
        self._commit()

    def close(self) -> None:
        try:
            self._flush_dead_letters(DEAD_LETTER_FLUSH_SECS)
            self._commit(final=True)
        finally:
            self._consumer.close()

    # -- assignment -------------------------------------------------------------
    def _partitions(self) -> list[tuple[str, int]]:
        """Every partition of the subscribed topics, sorted."""
        try:
            meta = self._consumer.list_topics(timeout=REFRESH_TIMEOUT)
        except KafkaException as exc:
            log.warning("%s: cannot list Kafka's topics (%s); keeping the partitions it has", self._name, exc)
            return sorted(self._offsets)
        if isinstance(self.topics, re.Pattern):
            names = [t for t in meta.topics if self.topics.fullmatch(t) and not t.startswith("__")]
        else:
            names = [t for t in self.topics if t in meta.topics and meta.topics[t].error is None]
        return sorted((t, p) for t in names for p in meta.topics[t].partitions)

    def _refresh_assignment(self) -> None:
        """Take this task's round-robin share of the partitions; commit and forget those no longer its own."""
        self._last_refresh = time.monotonic()
        everything = self._partitions()
        mine = {tp for i, tp in enumerate(everything) if i % self._task_count == self._task_index}
        revoked, added = set(self._offsets) - mine, sorted(mine - set(self._offsets))
        if revoked:
            self._commit()
            self._consumer.incremental_unassign([TopicPartition(t, p) for t, p in revoked])
            for tp in revoked:
                del self._offsets[tp]
                self._unsent.pop(tp, None)
            self._paused -= revoked
            self._ready = deque(c for c in self._ready if (c.topic, c.partition) not in revoked)
            self._in_flight = {m: v for m, v in self._in_flight.items() if m[:2] not in revoked}
            self._retries.forget_where(lambda m: m[:2] not in revoked)
            self._due = deque(m for m in self._due if m[:2] not in revoked)
            self._dead_lettering = {m: c for m, c in self._dead_lettering.items() if m[:2] not in revoked}
            log.info("%s: partitions %s moved to other tasks", self._name, sorted(revoked))
        if added:
            starts = self._first_offsets(added)
            self._consumer.incremental_assign([TopicPartition(t, p, starts[(t, p)]) for t, p in added])
            log.info("%s: reading partitions %s", self._name, added)

    def _first_offsets(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        asked = [TopicPartition(t, p) for t, p in partitions]
        committed = client.with_retries(f"{self._name}: committed offsets", lambda: self._consumer.committed(asked, 30))
        strategy = self.first_poll_offset_strategy
        earliest = strategy in (FirstPollOffsetStrategy.EARLIEST, FirstPollOffsetStrategy.UNCOMMITTED_EARLIEST)
        starts: dict[tuple[str, int], int] = {}
        for tp in committed:
            key = (tp.topic, tp.partition)
            resume = tp.offset >= 0
            if resume and strategy in (FirstPollOffsetStrategy.EARLIEST, FirstPollOffsetStrategy.LATEST):
                resume = self._committed_by_this_run(tp.metadata)
            if resume:
                starts[key] = tp.offset
            else:
                low, high = client.with_retries(
                    f"{self._name}: offsets of {key}",
                    lambda key=key: self._consumer.get_watermark_offsets(TopicPartition(*key), timeout=30),
                )
                starts[key] = low if earliest else high
            self._offsets[key] = OffsetManager(starts[key])
        return starts

    def _committed_by_this_run(self, metadata: str | None) -> bool:
        try:
            return self._run is not None and json.loads(metadata or "{}").get("run") == self._run
        except ValueError:
            return False

    # -- emitting ---------------------------------------------------------------
    def next_tuple(self) -> None:
        """A failed record whose backoff has passed, else as many polled records as the collector's
        ``emit_budget`` allows (one where it has none), polling when none are left."""
        if (self._due or self._retries.queue) and self._emit_retry():
            return
        if not self._ready:
            self._housekeeping()
            if not self._active or not self._poll():
                return
        chunk = self._ready[0]
        stream = chunk.stream
        rows, msg_ids = chunk.take(getattr(self._collector, "emit_budget", 1))
        if chunk.done:
            self._ready.popleft()
        if msg_ids is not None:
            self._in_flight.update(zip(msg_ids, zip(repeat(stream, len(rows)), rows, strict=True), strict=True))
        emit_many = getattr(self._collector, "emit_many", None)
        if emit_many is not None:
            try:
                emit_many(rows, msg_ids, stream)
                return
            except (TypeError, ValueError):  # a row the stream does not take: the others go one by one
                pass
        for i, values in enumerate(rows):
            msg_id = None if msg_ids is None else msg_ids[i]
            try:
                self._collector.emit(values, stream=stream, msg_id=msg_id)
            except (TypeError, ValueError) as exc:  # logged, counted and acked: it never blocks its partition
                self._collector.report_malformed(f"{msg_id or 'a record'} on stream {stream!r}: {exc}; acked")
                if msg_id is not None:
                    self.ack(msg_id)

    def _housekeeping(self) -> None:
        """Between polls: settle the dead-letter copies Kafka confirmed or refused, look for new partitions, and
        commit, when their periods have passed."""
        if self._producer is not None:
            self._settle_dead_letters()
        clock = time.monotonic()
        if clock - self._last_refresh > self.partition_refresh_period_ms / 1000.0:
            self._refresh_assignment()
        if clock - self._last_commit > self.offset_commit_period_ms / 1000.0:
            self._commit()

    def _emit_retry(self) -> bool:
        """Emit one failed record whose backoff has passed; False if none is due."""
        if not self._active:
            return False
        self._due.extend(self._retries.due(now()))
        while self._due:
            msg_id = self._due.popleft()
            copy = self._dead_lettering.get(msg_id)
            if copy is not None:  # a dead-letter copy Kafka refused: sent again
                self._send_dead_letter(msg_id, copy)
                return True
            if msg_id in self._in_flight:
                stream, values = self._in_flight[msg_id]
                self._collector.emit(values, stream=stream, msg_id=msg_id)
                return True
        return False

    def _poll(self) -> bool:
        """Poll, translate what came, and queue it to emit; False when nothing is ready to emit.

        A poll waits up to ``poll_timeout_ms`` for records, as Storm's does, unless the collector says its caller
        must not wait (``may_wait`` False): in a run, a worker calls its spout tasks one after another on the
        thread its bolts run on, and paces an idle topology itself, so a task whose partitions are all read would
        otherwise hold up the others ``poll_timeout_ms`` every wave."""
        self._pause_full_partitions()
        timeout = self.poll_timeout_ms / 1000.0 if getattr(self._collector, "may_wait", True) else 0.0
        records = self._consumer.consume(self.poll_records, timeout)
        tracked = self.processing_guarantee is ProcessingGuarantee.AT_LEAST_ONCE
        at_most_once = self.processing_guarantee is ProcessingGuarantee.AT_MOST_ONCE
        translate, offsets, null_values = self.translator, self._offsets, self._null_values
        emit_nulls = self.emit_null_tuples
        polled: dict[tuple[str, int], list[int]] = {}  # partition -> its offsets in this poll, in order
        nothing_to_wait_for: list[MsgId] = []  # translated to nothing: acked as soon as they count as emitted
        ready, chunk, run = self._ready, None, None  # run: the partition being read, when it is still this task's
        for record in records:
            if record.error() is not None:
                if record.error().code() != KafkaError._PARTITION_EOF:
                    log.warning("%s: %s", self._name, record.error())
                continue
            topic, partition = record.topic(), record.partition()
            if run is None or partition != run[1] or topic != run[0]:
                run, chunk = (topic, partition), None
                if run not in offsets:  # its partition moved to another task after the poll
                    run = None
                    continue
                run_offsets = polled.setdefault(run, [])
            offset = record.offset()
            run_offsets.append(offset)
            try:
                result = translate(record)
            except (MalformedMessage, ValueError, UnicodeDecodeError) as exc:
                if self._malformed(record, exc):
                    continue  # acked once its dead-letter copy is confirmed
                result = None
            if result is None:
                if not emit_nulls:
                    nothing_to_wait_for.append((topic, partition, offset))
                    continue
                stream, values = DEFAULT_STREAM, null_values
            elif type(result) is Routed:
                stream, values = result
            else:
                stream, values = DEFAULT_STREAM, result
            if chunk is None or chunk.stream != stream:
                chunk = _Chunk(topic, partition, stream, tracked)
                ready.append(chunk)
                rows, chunk_offsets = chunk.rows, chunk.offsets
            rows.append(values)
            if tracked:
                chunk_offsets.append(offset)
        if tracked:
            for tp, polled_offsets in polled.items():
                offsets[tp].emitted_many(polled_offsets)
            for topic, partition, offset in nothing_to_wait_for:
                offsets[topic, partition].acked(offset)
        if at_most_once and polled:
            self._commit_offsets({tp: o[-1] + 1 for tp, o in polled.items()}, asynchronous=False)
        return bool(self._ready)

    def _pause_full_partitions(self) -> None:
        """A partition with ``max_uncommitted_offsets`` emitted and not committed is not polled until it commits."""
        if self.processing_guarantee is not ProcessingGuarantee.AT_LEAST_ONCE:
            return
        full = {tp for tp, offsets in self._offsets.items() if offsets.uncommitted >= self.max_uncommitted_offsets}
        if full != self._paused:
            if full - self._paused:
                self._consumer.pause([TopicPartition(t, p) for t, p in full - self._paused])
            if self._paused - full:
                self._consumer.resume([TopicPartition(t, p) for t, p in self._paused - full])
            self._paused = full

    def _malformed(self, record: Any, error: BaseException) -> bool:
        """Report a record the translator refused and copy it to the dead-letter topic, if any; True when the
        record is acked only once its copy is confirmed (``AT_LEAST_ONCE``)."""
        where = f"topic {record.topic()} partition {record.partition()} offset {record.offset()}"
        if not self.dead_letter_topic:
            self._collector.report_malformed(f"{where}: {error}; acked")
            return False
        tracked = self.processing_guarantee is ProcessingGuarantee.AT_LEAST_ONCE
        then = "acked once the copy is confirmed" if tracked else "acked"
        self._collector.report_malformed(f"{where}: {error}; copied to {self.dead_letter_topic}, {then}")
        msg_id = (record.topic(), record.partition(), record.offset())
        copy = (record.value(), record.key(), {"squall.reason": str(error)[:500], "squall.source": where})
        if tracked:
            self._dead_lettering[msg_id] = copy
        self._send_dead_letter(msg_id, copy)
        return tracked

    def _send_dead_letter(self, msg_id: MsgId, copy: tuple[Any, Any, dict]) -> None:
        if self._producer is None:
            self._producer = client.producer(self._servers, self._dead_letter_settings)
        value, key, headers = copy

        def delivered(error: Any, _message: Any) -> None:
            self._dead_letter_reports.append((msg_id, error))

        while True:
            try:
                self._producer.produce(
                    self.dead_letter_topic, value=value, key=key, headers=headers, on_delivery=delivered
                )
                break
            except BufferError:  # the producer's queue is full: let deliveries drain it
                self._producer.poll(0.1)
        self._producer.poll(0)

    def _settle_dead_letters(self) -> None:
        """Handle the dead-letter delivery reports that came: a confirmed copy acks its record; a refused one is
        an error, and the copy is sent again after its backoff (given up past ``max_retries``, as a record
        is)."""
        self._producer.poll(0)
        reports, self._dead_letter_reports = self._dead_letter_reports, []
        for msg_id, error in reports:
            if error is None:
                if self._dead_lettering.pop(msg_id, None) is not None:
                    self._retries.forget(msg_id)
                    self._offsets[msg_id[:2]].acked(msg_id[2])
                continue
            where = f"topic {msg_id[0]} partition {msg_id[1]} offset {msg_id[2]}"
            if msg_id not in self._dead_lettering:  # not tracked (AT_MOST_ONCE, NO_GUARANTEE), or revoked
                self._collector.report_error(
                    RuntimeError(f"{self._name}: the copy of {where} to {self.dead_letter_topic} failed: {error}")
                )
                continue
            if self._retries.schedule(msg_id, now()):
                self._collector.report_error(
                    RuntimeError(
                        f"{self._name}: the copy of {where} to {self.dead_letter_topic} failed: {error}; "
                        "not acked, sent again after its backoff"
                    )
                )
            else:
                self.given_up += 1
                del self._dead_lettering[msg_id]
                self._retries.forget(msg_id)
                self._offsets[msg_id[:2]].acked(msg_id[2])
                self._collector.report_error(
                    RuntimeError(
                        f"{self._name}: the copy of {where} to {self.dead_letter_topic} failed more than "
                        f"{self.retry.max_retries} times ({error}); given up"
                    )
                )

    def _flush_dead_letters(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the copies in flight to be confirmed, and settle them."""
        if self._producer is None:
            return
        left = self._producer.flush(timeout)
        self._settle_dead_letters()
        if left:
            log.error(
                "%s: %d dead-letter copies to %s not confirmed within %gs; their records stay uncommitted, to be "
                "read and copied again",
                *(self._name, left, self.dead_letter_topic, timeout),
            )

    # -- acking -------------------------------------------------------------------
    def ack(self, msg_id: MsgId) -> None:
        if self._in_flight.pop(msg_id, None) is None:
            return  # its partition moved to another task: that task reads it from the last commit
        if self._retries.fails:
            self._retries.forget(msg_id)
        self._offsets[msg_id[:2]].acked(msg_id[2])

    def fail(self, msg_id: MsgId) -> None:
        if msg_id not in self._in_flight:
            return
        if not self._retries.schedule(msg_id, now()):
            self.given_up += 1
            self._collector.report_error(
                RuntimeError(f"{self._name}: record {msg_id} failed more than {self.retry.max_retries} times; given up")
            )
            self.ack(msg_id)

    # -- committing ----------------------------------------------------------------
    def _commit(self, final: bool = False) -> None:
        """Commit what may be committed: asynchronously while running (a broker that is away must not stall the
        spout; a failed commit comes back through ``_committed``), synchronously at ``close``."""
        self._last_commit = time.monotonic()
        if self.processing_guarantee is ProcessingGuarantee.AT_LEAST_ONCE:
            for tp, offsets in self._offsets.items():
                offset = offsets.next_commit()
                if offset is not None:
                    self._unsent[tp] = offset
            due, self._unsent = self._unsent, {}
            self._commit_offsets(due, asynchronous=not final)
        elif self.processing_guarantee is ProcessingGuarantee.NO_GUARANTEE:
            try:
                positions = self._consumer.position([TopicPartition(t, p) for t, p in self._offsets])
            except KafkaException as exc:
                log.warning("%s: cannot read positions: %s", self._name, exc)
                return
            positions = {(tp.topic, tp.partition): tp.offset for tp in positions if tp.offset >= 0}
            self._commit_offsets(positions, asynchronous=not final)

    def _commit_offsets(self, offsets: dict[tuple[str, int], int], asynchronous: bool) -> None:
        if not offsets:
            return
        partitions = [TopicPartition(t, p, o, metadata=self._commit_metadata) for (t, p), o in offsets.items()]
        try:
            self._consumer.commit(offsets=partitions, asynchronous=asynchronous)
        except KafkaException as exc:
            self._committed(exc.args[0] if exc.args else exc, partitions)

    def _committed(self, error: Any, partitions: list[TopicPartition]) -> None:
        """A commit's outcome (librdkafka calls it from ``consume``): what failed is committed again next time."""
        failed = [tp for tp in partitions if error is not None or tp.error is not None]
        if not failed or not hasattr(self, "_offsets"):
            return
        log.warning("%s: commit failed (%s); tried again at the next commit", self._name, error or failed[0].error)
        for tp in failed:
            key = (tp.topic, tp.partition)
            if key in self._offsets and self.processing_guarantee is ProcessingGuarantee.AT_LEAST_ONCE:
                self._unsent[key] = max(self._unsent.get(key, tp.offset), tp.offset)
