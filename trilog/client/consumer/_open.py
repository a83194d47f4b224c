"""``open_consumer``: Kafka's consumer for the body of ``async with``.

The keywords are ``ConsumerConfig``'s (typed as ``KafkaConsumerOptions``), checked into one
config before anything connects: an unknown one is a ``TypeError``, a bad value a
``ValueError`` naming the setting.  The seeds' consumer connector (``topics={topic:
streams}``, ``topic_filter=``) has an opener of its own, ``open_consumer_connector``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Unpack

import trio

from trilog._concurrency import unwrap_exception_group
from trilog.client._client import open_client
from trilog.client._settings import config_from_options
from trilog.client.consumer._config import ConsumerConfig, KafkaConsumerOptions
from trilog.client.consumer._consumer import Consumer

#: the connector's ways of naming what it reads, which Kafka's consumer does not take
_CONNECTOR_KEYWORDS = ("topics", "topic_filter")


def open_consumer(*topics: str | Iterable[str], **options: Unpack[KafkaConsumerOptions]
                  ) -> AbstractAsyncContextManager[Consumer]:
    """Kafka's consumer (``Consumer``: subscribe, poll, seek, pause, commit, rebalance
    listeners) with kafka-python's names and defaults (``ConsumerConfig``).

    ``*topics`` (names, or lists of names, as kafka-python's ``KafkaConsumer("a", "b")``)
    or ``pattern=`` subscribe at once, and the ``async with`` body starts once the first
    assignment is in; with neither, call ``subscribe`` or ``assign``.  ``security_protocol``,
    ``ssl_*``, ``sasl_*``: TLS and SASL to the brokers, as ``open_producer``.
    """
    given = [name for name in _CONNECTOR_KEYWORDS if name in options]
    if given:
        raise TypeError(
            f"open_consumer() opens Kafka's consumer, which takes no {given[0]}=: for the "
            "seeds' consumer connector with streams use trilog.open_consumer_connector("
            f"group_id, {given[0]}=..., ...) (trilog.client.open_consumer_connector)")
    config = config_from_options(ConsumerConfig, options, "open_consumer")
    # kafka-python's KafkaConsumer("a", "b") and aiokafka's; a list is taken too.
    flat = [t for item in topics for t in ([item] if isinstance(item, str) else item)]
    return _opened(flat, config)


@asynccontextmanager
async def _opened(topics: list[str], config: ConsumerConfig) -> AsyncIterator[Consumer]:
    with unwrap_exception_group():
        async with open_client(config.bootstrap_servers, client_id=config.client_id,
                               request_timeout_ms=config.request_timeout_ms,
                               bootstrap_timeout_ms=config.bootstrap_timeout_ms,
                               metadata_max_age_ms=config.metadata_max_age_ms,
                               allow_auto_create_topics=False,
                               security=config.security) as client:
            # The coordinator's connection lives in a nursery of its own, which outlives
            # the consumer's tasks: closing still commits and leaves through it.
            async with trio.open_nursery() as holder:
                async with trio.open_nursery() as nursery:
                    consumer = Consumer(client, nursery, holder, config)
                    nursery.start_soon(consumer._fetcher.run)
                    if config.group_id is not None and config.enable_auto_commit:
                        nursery.start_soon(consumer._auto_commit)
                    try:
                        if topics or config.pattern is not None:
                            consumer.subscribe(topics, pattern=config.pattern,
                                               listener=config.listener)
                            await consumer._wait_first_assignment()
                        elif config.listener is not None:
                            consumer._subscription.listener = config.listener
                        yield consumer
                    finally:
                        with trio.CancelScope(shield=True), trio.move_on_after(10):
                            await consumer._close()
                        nursery.cancel_scope.cancel()
                holder.cancel_scope.cancel()
            if consumer._failure is not None and not consumer._failure_seen:
                raise consumer._failure
