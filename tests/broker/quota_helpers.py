"""Requests of the client quota APIs over a blocking socket, for the quota tests."""

from __future__ import annotations

import itertools
import socket

from broker_helpers import read_response

from trilog import protocol as p

_corr = itertools.count(1)

DR = p.DescribeClientQuotasRequest
AR = p.AlterClientQuotasRequest


def ask(sock: socket.socket, request: p.Message, version: int, client_id: str = "e2e"):
    corr = next(_corr)
    sock.sendall(p.encode_request(request, version, corr, client_id=client_id))
    return read_response(sock, type(request), version, corr)


def entity(**parts: str | None):
    return [AR.EntryData.EntityData(entity_type=k.replace("_", "-"), entity_name=v)
            for k, v in parts.items()]


def alter_request(ops: dict[str, float | None], validate_only: bool = False, **parts):
    return AR(entries=[AR.EntryData(entity=entity(**parts), ops=[
        AR.EntryData.OpData(key=k, value=v or 0.0, remove=v is None) for k, v in ops.items()])],
        validate_only=validate_only)


def described(response) -> dict:
    assert response.error_code == 0, response
    return {tuple((d.entity_type, d.entity_name) for d in e.entity):
            {v.key: v.value for v in e.values} for e in response.entries}


def everything(sock, version=1):
    return described(ask(sock, DR(components=[], strict=False), version))
