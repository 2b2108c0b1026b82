"""Circuits: a dependency failing as a whole (an extractor, a webhook receiver) gets probes, not
one call per job or event, and its failures spend no job's attempts and no delivery's retries.

The rules, shared by every worker on every machine through one row per dependency:
- Transient failures from `CIRCUIT_FAILURES` different origins, from any workers, with no
  success between them, open the circuit. A failure's origin is what could have caused it
  besides the dependency (its caller names it): a job, for its polls; a client's source, for
  its submissions; an event, for a delivery. One origin's failures, however many, count once:
  they are that origin's fault (a source URL that trickles, a document the extractor chokes
  on) and end its own work, never everyone's. A run across origins means the dependency is
  down. A round of calls with any success resets the count.
- While it is open, work waits until `probe_at` (held work is due exactly then) and one call
  goes out as the probe; probes back off from `CIRCUIT_PROBE_FIRST_SECONDS`, doubling, to at
  most `CIRCUIT_PROBE_MAX_SECONDS` apart.
- The first success (any answer that is not a transient fault) closes it, and the held work
  becomes due at once.
- Staff may pause a dependency (maintenance, a key rotation): work waits, no probe goes out,
  until they resume it.

A healthy dependency costs no write: the row changes only when its state or its failure count
does. Opening and closing are logged once each.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from jobtracking.infra.storable import safe_text
from jobtracking.models import Circuit, CircuitState

logger = logging.getLogger(__name__)

# While paused, held work looks again this often (a resume releases it at once).
PAUSE_RECHECK = timedelta(seconds=30)


@dataclass(frozen=True)
class Gate:
    """Whether calls to a dependency may go now: all of them (`hold_until` None), or none until
    `hold_until` but, if `probe`, one now."""

    hold_until: datetime | None = None
    probe: bool = False


OPEN_GATE = Gate()


def probe_delay(probes: int) -> timedelta:
    first, cap = settings.CIRCUIT_PROBE_FIRST_SECONDS, settings.CIRCUIT_PROBE_MAX_SECONDS
    return timedelta(seconds=min(cap, first * 2 ** min(probes, 30)))


def circuit_gate(health: Circuit | None, now: datetime) -> Gate:
    """Call inside the transaction that holds the work back. When a probe is due, exactly one
    caller across every worker wins it (compare-and-set on `probe_at`)."""
    if health is None or not health.holding:
        return OPEN_GATE
    if health.probe_at is not None and health.probe_at > now:
        return Gate(health.probe_at)
    probing = health.state == CircuitState.OPEN
    next_at = now + (probe_delay(health.probes) if probing else PAUSE_RECHECK)
    model = type(health)
    won = model.objects.filter(pk=health.pk, state=health.state, probe_at=health.probe_at).update(
        probe_at=next_at, probes=F("probes") + int(probing)
    )
    if won:
        health.probe_at = next_at
        return Gate(next_at, probe=probing)
    return circuit_gate(model.objects.get(pk=health.pk), now)


def circuit_report(
    model: type[Circuit],
    key: int,
    *,
    successes: int,
    failed_keys: list[str],
    error: str,
    now: datetime,
    release: Callable[[datetime], None],
) -> Circuit:
    """Record a round of calls to one dependency: how many succeeded, and the origins of those
    that failed transiently; returns its circuit afterwards. A success closes an open circuit
    and `release(held_until)` makes the held work due now, in the same transaction."""
    with transaction.atomic():
        health, _ = model.objects.select_for_update().get_or_create(pk=key)
        # The origins since the last success, as many as it takes to open the circuit.
        known = list(health.failed_origins or [])
        new = [origin for origin in dict.fromkeys(failed_keys) if origin not in known]
        failures = len(new)
        if failed_keys:
            health.last_error, health.last_error_at = safe_text(error)[:500], now
            health.failed_origins = (known + new)[-settings.CIRCUIT_FAILURES :]
        if health.state == CircuitState.PAUSED:
            pass
        elif successes:
            health.failures, health.failed_origins = 0, []
            if health.state == CircuitState.OPEN:
                logger.warning("%s: circuit closed after %d probe(s)", health, health.probes)
                held_until = health.probe_at
                _set_state(health, CircuitState.CLOSED, now)
                release(held_until)
        elif failures:
            health.failures += failures
            if health.state == CircuitState.CLOSED and health.failures >= settings.CIRCUIT_FAILURES:
                _set_state(health, CircuitState.OPEN, now, probe_at=now + probe_delay(0))
                logger.warning(
                    "%s: circuit opened after %d failures in a row: %s",
                    health,
                    health.failures,
                    health.last_error,
                )
        health.save()
    return health


@dataclass
class Tally:
    """A round's calls to one dependency: how many succeeded, and the origins (see the module's
    docstring) of those that failed as an outage would."""

    successes: int = 0
    failed_keys: list[str] = field(default_factory=list)
    error: str = ""

    def failed(self, key: str, error: str) -> None:
        self.failed_keys.append(key)
        self.error = error


def circuits_report(
    model: type[Circuit],
    tallies: dict[int, Tally],
    known: dict[int, Circuit | None],
    release: Callable[[int], Callable[[datetime], None]],
) -> dict[int, datetime]:
    """Report a round's tallies (`known`: the circuits as the round found them); returns, for
    each dependency whose circuit now holds work, until when. A dependency that was healthy
    and stays so costs no write."""
    holding = {}
    for key, tally in tallies.items():
        health = known.get(key)
        if not tally.failed_keys and (health is None or not (health.holding or health.failures)):
            continue
        health = circuit_report(
            model,
            key,
            successes=tally.successes,
            failed_keys=tally.failed_keys,
            error=tally.error,
            now=timezone.now(),
            release=release(key),
        )
        if health.holding:
            holding[key] = health.probe_at
    return holding


def circuit_pause(model: type[Circuit], key: int, *, reason: str, now: datetime) -> Circuit:
    """Hold all work for the dependency until `circuit_resume`."""
    with transaction.atomic():
        health, _ = model.objects.select_for_update().get_or_create(pk=key)
        _set_state(health, CircuitState.PAUSED, now, probe_at=now + PAUSE_RECHECK)
        health.reason = reason[:500]
        health.save()
    logger.warning("%s: paused by staff: %s", health, reason)
    return health


def circuit_resume(
    model: type[Circuit], key: int, *, now: datetime, release: Callable[[datetime], None]
) -> Circuit:
    """Back to work (paused or open): the held work becomes due now."""
    with transaction.atomic():
        health, _ = model.objects.select_for_update().get_or_create(pk=key)
        held_until = health.probe_at
        _set_state(health, CircuitState.CLOSED, now)
        health.failures, health.failed_origins = 0, []
        health.save()
        if held_until is not None:
            release(held_until)
    logger.warning("%s: resumed by staff", health)
    return health


def _set_state(health: Circuit, state: str, now: datetime, probe_at: datetime | None = None):
    health.state, health.since, health.probes, health.probe_at = state, now, 0, probe_at
    if state != CircuitState.PAUSED:
        health.reason = ""
