"""Ports for servers started as children: drawn below the kernel's ephemeral range, where
no ``bind(0)`` or outgoing connection takes one before its server binds it."""

from __future__ import annotations

import socket

import pytest

from scaffolds.engines import vllm_server
from scaffolds.engines.vllm_server import free_ports, listen_ports


def test_ports_are_drawn_below_the_ephemeral_range_and_a_server_can_bind_them() -> None:
    ports = free_ports(4)
    assert len(set(ports)) == 4
    assert all(20000 <= port < vllm_server.ephemeral_low() for port in ports)
    with socket.socket() as server:  # as uvicorn and vLLM bind
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", ports[0]))


def test_a_range_with_no_room_below_it_falls_back_to_bind_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(vllm_server, "ephemeral_low", lambda: 1024)
    assert listen_ports(1024) == range(0) and listen_ports(20999) == range(0)
    assert listen_ports(21000) == range(20000, 21000)
    [port] = free_ports(1)
    assert port >= 1024  # the kernel's own choice, which never takes a port below 1024


def test_a_pool_whose_every_port_is_taken_falls_back_to_bind_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        held = int(taken.getsockname()[1])
        monkeypatch.setattr(vllm_server, "listen_ports", lambda low: range(held, held + 1))
        [port] = free_ports(1)
    assert port != held
