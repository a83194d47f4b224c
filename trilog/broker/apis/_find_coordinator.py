"""FindCoordinator (10): where a group (key type 0) or a transactional id (key type 1) is
coordinated.  Each coordinator says which broker (``coordinator_for``, creating its internal
topic on first use); this answers with that broker's address on the listener the client
came in on.  (The ACL checks, Describe on the group or the transactional id, are the
dispatcher's gate: ``security.refused_request``.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import trio

from trilog.broker.cluster import Cluster
from trilog.broker.network import ApiHandler
from trilog.broker.network._network import current_session
from trilog.errors import NO_ERROR, ApiError, CoordinatorNotAvailableError, InvalidRequestError
from trilog.protocol import ApiKey, FindCoordinatorResponse, RequestHeader

GROUP_KEY = 0
TRANSACTION_KEY = 1


class CoordinatorLocator(Protocol):
    async def coordinator_for(self, key: str) -> int:
        """The coordinator's node id; ``ApiError`` when there is none now."""
        ...


class FindCoordinatorApi:
    """Serves FindCoordinator for the group and the transaction coordinators."""

    def __init__(self, cluster: Cluster, groups: CoordinatorLocator,
                 transactions: CoordinatorLocator) -> None:
        self.cluster = cluster
        self.locators = {GROUP_KEY: groups, TRANSACTION_KEY: transactions}

    def apis(self) -> Mapping[int, ApiHandler]:
        return {ApiKey.FIND_COORDINATOR: self.find_coordinator}

    async def find_coordinator(self, request: Any, header: RequestHeader) -> Any:
        R = FindCoordinatorResponse

        def fail(code: int, message: str) -> Any:
            return R(throttle_time_ms=0, error_code=code, error_message=message, node_id=-1,
                     host="", port=-1)

        key_type = request.key_type if header.api_version >= 1 else GROUP_KEY
        locator = self.locators.get(key_type)
        if locator is None:
            await trio.lowlevel.checkpoint()
            return fail(InvalidRequestError.code, f"unknown coordinator key type {key_type}")
        try:
            node_id = await locator.coordinator_for(request.key)
        except ApiError as exc:
            return fail(exc.code, str(exc))
        node = next((b for b in self.cluster.brokers() if b.node_id == node_id), None)
        address = node.address(current_session.get().listener) if node else None
        if node is None or address is None:
            return fail(CoordinatorNotAvailableError.code,
                        f"the coordinator (broker {node_id}) is not reachable on this listener")
        return R(throttle_time_ms=0, error_code=NO_ERROR, error_message=None,
                 node_id=node.node_id, host=address[0], port=address[1])
