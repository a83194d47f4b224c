"""The quota calculator: which quota applies to a client, its rate, and its throttle time.

Kafka's ``ClientQuotaManager`` with its default callback.  For each quota type on its own
(a client with only a ``producer_byte_rate`` set is unlimited for the others) the quota
that applies to a (user, client id) is the first one set of:

1. ``/config/users/<user>/clients/<client-id>``
2. ``/config/users/<user>/clients/<default>``
3. ``/config/users/<user>``
4. ``/config/users/<default>/clients/<client-id>``
5. ``/config/users/<default>/clients/<default>``
6. ``/config/users/<default>``
7. ``/config/clients/<client-id>``
8. ``/config/clients/<default>``

and who shares its rate follows from the level (Kafka's metric tags): a user's quota (3, 6)
is one rate for all of that user's clients; a client id's quota (7, 8) one rate per client
id, whoever the user; the others one per (user, client id).  So ``/config/clients/<default>``
gives *each* client id the quota, not all of them together.

Each rate is a ``Rate`` (``_rate.py``).  ``record`` adds a request's bytes (or, for
``request_percentage``, its handler time as percent-seconds) and returns the throttle time
when the rate is over the quota; the request quota's throttle is capped at one window, as
Kafka's.  Rates unused for ``SENSOR_EXPIRY_MS`` are dropped (Kafka's sensor expiry).

Pure: times are given; not thread-safe (the broker calls it from the trio thread).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from trilog.broker.quotas._entity import (
    CLIENT_ID,
    QUOTA_KEYS,
    REQUEST_PERCENTAGE,
    USER,
    Entity,
    Quotas,
)
from trilog.broker.quotas._rate import Rate, RateConfig, throttle_time_ms

#: A rate nobody recorded into for this long is dropped (Kafka: one hour).
SENSOR_EXPIRY_MS = 3_600_000
#: How often (at most) unused rates are looked for.
_SWEEP_MS = 60_000

#: ``(quota key, user tag, client-id tag)``: whose rate (a tag "" is every one).
SensorKey = tuple[str, str, str]


class _Sensor:
    __slots__ = ("rate", "last_ms", "throttle_ms", "throttled")

    def __init__(self, config: RateConfig, now_ms: float) -> None:
        self.rate = Rate(config)
        self.last_ms = now_ms
        self.throttle_ms = 0  # throttle time given, in all
        self.throttled = 0  # responses throttled


def levels(user: str, client_id: str) -> tuple[tuple[Entity, tuple[str, str]], ...]:
    """The eight entities, in precedence order, each with the tags of the rate it sets."""
    u, c, du, dc = (USER, user), (CLIENT_ID, client_id), (USER, None), (CLIENT_ID, None)
    both, user_only, client_only = (user, client_id), (user, ""), ("", client_id)
    return (((u, c), both), ((u, dc), both), ((u,), user_only), ((du, c), both),
            ((du, dc), both), ((du,), user_only), ((c,), client_only), ((dc,), client_only))


class QuotaManager:
    """Every entity's quotas and the clients' rates (see the module docstring)."""

    def __init__(self, config: RateConfig = RateConfig()) -> None:
        self.config = config
        self._entities: dict[Entity, Quotas] = {}
        #: quota key -> {entity: value}: only entities that set that quota
        self._by_key: dict[str, dict[Entity, float]] = {k: {} for k in QUOTA_KEYS}
        #: (key, user, client id) -> (sensor key, quota), or None: unlimited
        self._resolved: dict[tuple[str, str, str], tuple[SensorKey, float] | None] = {}
        self._sensors: dict[SensorKey, _Sensor] = {}
        self._swept_ms = 0.0
        #: is any quota set at all (none: requests are not even looked at)
        self.active = False

    # -- the quotas -------------------------------------------------------------------------

    def set(self, e: Entity, quotas: Mapping[str, float]) -> None:
        """Replace ``e``'s quotas (empty: it has none)."""
        if quotas:
            self._entities[e] = dict(quotas)
        else:
            self._entities.pop(e, None)
        for key, by_entity in self._by_key.items():
            if key in quotas:
                by_entity[e] = quotas[key]
            else:
                by_entity.pop(e, None)
        self._resolved.clear()
        self.active = any(self._by_key.values())

    def replace_all(self, entities: Mapping[Entity, Mapping[str, float]]) -> None:
        for e in set(self._entities) - set(entities):
            self.set(e, {})
        for e, quotas in entities.items():
            self.set(e, quotas)

    def get(self, e: Entity) -> Quotas:
        return dict(self._entities.get(e, {}))

    def entities(self) -> dict[Entity, Quotas]:
        return {e: dict(q) for e, q in self._entities.items()}

    def enabled(self, key: str) -> bool:
        """Is any quota of this type set (none: nothing to measure)?"""
        return bool(self._by_key[key])

    def resolve(self, key: str, user: str, client_id: str) -> tuple[SensorKey, float] | None:
        """Whose rate a client's requests count in, and its quota; None: unlimited."""
        cache_key = (key, user, client_id)
        try:
            return self._resolved[cache_key]
        except KeyError:
            pass
        found: tuple[SensorKey, float] | None = None
        by_entity = self._by_key[key]
        if by_entity:
            for e, (user_tag, client_tag) in levels(user, client_id):
                if e in by_entity:
                    found = ((key, user_tag, client_tag), by_entity[e])
                    break
        self._resolved[cache_key] = found
        return found

    def max_in_window(self, key: str, user: str, client_id: str) -> float | None:
        """The most a client may take in one go before the rate alone throttles it: its
        quota over ``samples - 1`` windows (Kafka's ``getMaxValueInQuotaWindow``: a
        consumer's fetch is capped at it, else a fetch larger than that would be answered
        empty, throttled and taken back, again and again); None: unlimited."""
        resolved = self.resolve(key, user, client_id)
        if resolved is None:
            return None
        config = self.config
        return max(resolved[1] * (config.samples - 1) * config.window_ms / 1000, 1.0)

    # -- the rates --------------------------------------------------------------------------

    def record(self, key: str, user: str, client_id: str, value: float, now_ms: float) -> int:
        """Count ``value`` against the client's quota; the throttle time it earns (ms)."""
        resolved = self.resolve(key, user, client_id)
        if resolved is None:
            return 0
        sensor_key, quota = resolved
        sensor = self._sensor(sensor_key, now_ms)
        rate = sensor.rate
        rate.record(value, now_ms)
        measured = rate.measure(now_ms)
        if measured <= quota:
            return 0
        throttle = throttle_time_ms(measured, quota, rate.window_size_ms(now_ms))
        if key == REQUEST_PERCENTAGE:
            throttle = min(throttle, self.config.window_ms)
        return throttle

    def unrecord(self, key: str, user: str, client_id: str, value: float,
                 now_ms: float) -> None:
        """Take back ``value`` (a fetch answered empty because it was throttled)."""
        resolved = self.resolve(key, user, client_id)
        if resolved is not None:
            self._sensor(resolved[0], now_ms).rate.record(-value, now_ms)

    def throttled(self, key: str, user: str, client_id: str, throttle_ms: int) -> None:
        """Note a response throttled for ``throttle_ms`` (the throttle-time metric)."""
        resolved = self.resolve(key, user, client_id)
        if resolved is not None:
            sensor = self._sensors.get(resolved[0])
            if sensor is not None:
                sensor.throttle_ms += throttle_ms
                sensor.throttled += 1

    def _sensor(self, key: SensorKey, now_ms: float) -> _Sensor:
        if now_ms - self._swept_ms >= _SWEEP_MS:
            self._sweep(now_ms)
        sensor = self._sensors.get(key)
        if sensor is None:
            sensor = self._sensors[key] = _Sensor(self.config, now_ms)
        sensor.last_ms = now_ms
        return sensor

    def _sweep(self, now_ms: float) -> None:
        self._swept_ms = now_ms
        expired = [k for k, s in self._sensors.items() if now_ms - s.last_ms >= SENSOR_EXPIRY_MS]
        for k in expired:
            del self._sensors[k]
        if len(self._resolved) > 10_000:
            self._resolved.clear()

    def statistics(self, now_ms: float) -> Iterator[tuple[SensorKey, float, int, int]]:
        """``(sensor key, rate now, throttle time given in ms, responses throttled)`` of
        every rate kept."""
        for key, sensor in list(self._sensors.items()):
            yield key, sensor.rate.measure(now_ms), sensor.throttle_ms, sensor.throttled
