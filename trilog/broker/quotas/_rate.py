"""Kafka's quota sensor: a rate over a window of samples, and the throttle time it implies.

``Rate`` is Kafka's ``Rate`` over a ``SampledStat`` (``org.apache.kafka.common.metrics``):
``samples`` samples (``quota.window.num``, 11) of ``window_ms`` each
(``quota.window.size.seconds``, 1 s).  A value is added to the current sample; a sample
``window_ms`` old is done and the next one (the oldest, reset) takes over; samples older than
the whole window are reset before a measure.  The rate is the samples' total over the time
they cover, counted as at least ``samples - 1`` full windows: a client that just started is
measured over 10 s, as in Kafka, so a burst of up to ten seconds' quota goes unthrottled.

``throttle_time_ms`` is Kafka's ``QuotaUtils.throttleTime``: how long the client must stay
quiet for its rate to come back to the quota, ``(rate - quota) / quota * window``.

Pure: times are given (milliseconds), nothing is read from a clock; not thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RateConfig:
    """``samples`` windows of ``window_ms`` (Kafka's ``quota.window.num`` and
    ``quota.window.size.seconds``)."""

    samples: int = 11
    window_ms: int = 1000


class _Sample:
    __slots__ = ("start_ms", "value")

    def __init__(self, start_ms: float) -> None:
        self.start_ms = start_ms
        self.value = 0.0

    def reset(self, now_ms: float) -> None:
        self.start_ms = now_ms
        self.value = 0.0


class Rate:
    """A value per second over a window of samples (see the module docstring)."""

    __slots__ = ("config", "_samples", "_current")

    def __init__(self, config: RateConfig = RateConfig()) -> None:
        self.config = config
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: float) -> None:
        """Add ``value`` at ``now_ms`` (negative: take back what was recorded)."""
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.config.window_ms:
            sample = self._advance(now_ms)
        sample.value += value

    def measure(self, now_ms: float) -> float:
        """The rate per second at ``now_ms``."""
        self._purge(now_ms)
        total = sum(s.value for s in self._samples)
        return total / (self.window_size_ms(now_ms) / 1000)

    def window_size_ms(self, now_ms: float) -> float:
        """The time the rate is taken over: since the oldest sample began, and at least
        ``samples - 1`` windows (Kafka's ``Rate.windowSize``)."""
        self._purge(now_ms)
        config = self.config
        oldest = min((s.start_ms for s in self._samples), default=now_ms)
        elapsed = now_ms - oldest
        full = int(elapsed // config.window_ms)
        if full < config.samples - 1:
            elapsed += (config.samples - 1 - full) * config.window_ms
        return max(elapsed, 1.0)

    def _current_sample(self, now_ms: float) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: float) -> _Sample:
        self._current = (self._current + 1) % self.config.samples
        if self._current >= len(self._samples):
            sample = _Sample(now_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(now_ms)
        return sample

    def _purge(self, now_ms: float) -> None:
        expire = self.config.samples * self.config.window_ms
        for sample in self._samples:
            if now_ms - sample.start_ms >= expire:
                sample.reset(now_ms)


def throttle_time_ms(rate: float, quota: float, window_ms: float) -> int:
    """How long a client measured at ``rate`` against ``quota`` waits (0 within it)."""
    if rate <= quota or quota <= 0:
        return 0
    return round((rate - quota) / quota * window_ms)
