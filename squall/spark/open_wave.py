"""When a worker calls its spout tasks between waves: a pure state machine, events in and instructions out.

A wave's ``WaveInput`` lets each spout task make up to ``spout_calls`` emits. The worker makes them at once (the
*burst*), and when the spouts had less to give than that, their part of the wave stays *open*: at the worker's idle
moments it calls them again, every ``squall.wave.open.call.ms``, and what they emit leaves at once, as a bolt's
early batches do. So a tuple a source makes between two waves travels as soon as it is read, not with the next
wave's burst, and the waves themselves, with their reports, markers and logs, come no more often than
``squall.wave.open.ms``, however light the load. The part ends (its ``last`` batches leave and its report is
made) when:

* the wave's calls are spent (the spouts have more than a wave holds: the next one takes over at once);
* it has been open ``squall.wave.open.ms``;
* the spouts emitted nothing for ``squall.wave.open.dry.ms`` (at least two calls' time): the flow stopped, and
  the topology may be going idle, which the driver learns only from waves that complete;
* the burst emitted nothing at all (there is no flow to keep open), the spouts are deactivated, or
  ``squall.wave.open.ms`` is 0.

The next wave's ``WaveInput`` may come while one is open: its spout part waits for that one to end (the worker
holds it), so a spout task's waves stay in order, each ending before the next begins.

``OpenWave`` holds no I/O and reads no clock: the worker passes ``now`` with each event and carries out what
``due`` says.
"""

from __future__ import annotations

from dataclasses import dataclass

from squall.model.config import DEFAULTS, SQUALL_WAVE_OPEN_CALL_MS, SQUALL_WAVE_OPEN_DRY_MS, SQUALL_WAVE_OPEN_MS


@dataclass(frozen=True)
class CallSpouts:
    """Call the spout tasks again, into the open wave."""


@dataclass(frozen=True)
class EndSpoutPart:
    """End the open wave's spout part now."""


@dataclass(frozen=True)
class WaitUntil:
    """Nothing is due before ``when`` (a time on the caller's clock), unless a message comes."""

    when: float


CALL_SPOUTS = CallSpouts()
END_SPOUT_PART = EndSpoutPart()


@dataclass(frozen=True)
class OpenWaveSettings:
    """``squall.wave.open.ms``, ``squall.wave.open.call.ms`` and ``squall.wave.open.dry.ms``, in seconds."""

    open_secs: float
    call_secs: float
    dry_secs: float


def open_wave_settings(conf: dict) -> OpenWaveSettings:
    """The topology's settings, or squall's defaults."""

    def secs(key: str) -> float:
        return float(conf.get(key, DEFAULTS[key])) / 1000.0

    call = secs(SQUALL_WAVE_OPEN_CALL_MS)
    # A part that may not go without an emit for two calls would end before the spouts were asked twice.
    return OpenWaveSettings(secs(SQUALL_WAVE_OPEN_MS), call, max(secs(SQUALL_WAVE_OPEN_DRY_MS), 2 * call))


class OpenWave:
    """One wave's spout part, from its burst to its end."""

    def __init__(self, settings: OpenWaveSettings) -> None:
        self.settings = settings
        self.is_open = False
        self._ends_at = self._last_emit_at = self._next_call_at = 0.0

    def burst(self, now: float, emits: int, spent: bool, active: bool) -> bool:
        """The wave's first calls made ``emits``; ``spent`` when every spout task used all of its calls. Whether
        the part stays open (else it ends now)."""
        s = self.settings
        self.is_open = s.open_secs > 0 and emits > 0 and not spent and active
        self._ends_at = now + s.open_secs
        self._last_emit_at = now
        self._next_call_at = now + s.call_secs
        return self.is_open

    def due(self, now: float) -> CallSpouts | EndSpoutPart | WaitUntil:
        """What to do at an idle moment of the worker, the part being open."""
        dry_at = self._last_emit_at + self.settings.dry_secs
        if not self.is_open or now >= self._ends_at or now >= dry_at:  # spent, or its time is up
            return END_SPOUT_PART
        if now >= self._next_call_at:
            return CALL_SPOUTS
        return WaitUntil(min(self._next_call_at, self._ends_at, dry_at))

    def called(self, now: float, emits: int, spent: bool) -> bool:
        """A ``CallSpouts`` made ``emits``. Whether the part stays open (else it ends now: its calls are spent)."""
        self._next_call_at = now + self.settings.call_secs
        if emits:
            self._last_emit_at = now
        if spent:
            self.is_open = False
        return self.is_open

    def ended(self) -> None:
        self.is_open = False
