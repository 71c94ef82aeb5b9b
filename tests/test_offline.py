"""The network guard: tests, notebook kernels and the build cannot reach anything but loopback.

No test here sends a packet off the machine, even if the guard were broken: before trying a
public address, each test checks that the guard is installed and replaces the real socket
call behind it (``netguard.ORIGINAL``) with a recorder that only notes the call. A working
guard refuses before reaching the recorder.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import netguard

ROOT = Path(__file__).resolve().parent.parent
TESTENV = ROOT / "tools" / "testenv"
PUBLIC = [("203.0.113.9", 443), ("2001:db8::1", 443, 0, 0), ("::ffff:203.0.113.9", 80, 0, 0)]


@pytest.fixture
def recorder(monkeypatch):
    """Replace every real socket call behind the guard with a recorder; yield the calls."""
    assert netguard.installed(), "the autouse no_network fixture must have installed the guard"
    calls = []

    def record(name):
        real = netguard.ORIGINAL[name]

        def call(*args, **kwargs):
            calls.append((name, args))
            if name == "getaddrinfo" and netguard._is_loopback_ip(str(args[0])) is not None:
                return real(*args, **kwargs)     # a numeric address: parsed locally, no query
            raise AssertionError(f"the guard let {name}{args} through")
        return call

    for name in list(netguard.ORIGINAL):
        monkeypatch.setitem(netguard.ORIGINAL, name, record(name))
    return calls


@pytest.mark.parametrize("address", PUBLIC, ids=["ipv4", "ipv6", "ipv4-mapped"])
def test_connect_to_a_public_address_is_refused_at_once(recorder, address):
    family = socket.AF_INET if len(address) == 2 else socket.AF_INET6
    if family == socket.AF_INET6 and not socket.has_ipv6:
        pytest.skip("no IPv6 support")
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        start = time.perf_counter()
        with pytest.raises(netguard.NetworkBlocked, match="runs offline"):
            sock.connect(address)
        with pytest.raises(netguard.NetworkBlocked):
            sock.connect_ex(address)
        assert time.perf_counter() - start < 0.5
    assert recorder == []


def test_create_connection_and_udp_are_refused(recorder):
    with pytest.raises(netguard.NetworkBlocked):
        socket.create_connection(("198.51.100.7", 80), timeout=5)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        with pytest.raises(netguard.NetworkBlocked):
            sock.sendto(b"x", ("192.0.2.53", 53))
    assert all(name == "getaddrinfo" for name, _ in recorder)   # numeric look-ups send nothing


@pytest.mark.parametrize("host", ["pypi.org", "huggingface.co", b"example.com"])
def test_name_lookups_are_refused_before_any_dns_query(recorder, host):
    with pytest.raises(netguard.NetworkBlocked, match="DNS"):
        socket.getaddrinfo(host, 443)
    with pytest.raises(netguard.NetworkBlocked):
        socket.gethostbyname(host)
    assert recorder == []


def test_loopback_and_unix_sockets_work():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        accepted = []
        thread = threading.Thread(target=lambda: accepted.append(server.accept()[0]))
        thread.start()
        with socket.create_connection(("localhost", port), timeout=5) as client:
            thread.join(5)
            connection = accepted[0]
            client.sendall(b"ping")
            assert connection.recv(4) == b"ping"
            connection.close()
    left, right = socket.socketpair(socket.AF_UNIX)
    with left, right:
        left.sendall(b"ok")
        assert right.recv(2) == b"ok"


@pytest.mark.parametrize("host, allowed", [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("::ffff:127.0.0.1", True),
    ("localhost", True), ("LOCALHOST.", True), (None, True), (socket.gethostname(), True),
    ("10.0.0.1", False), ("192.168.1.1", False), ("8.8.8.8", False), ("::", False),
    ("0.0.0.0", False), ("example.com", False), ("<broadcast>", False),
])
def test_which_hosts_count_as_this_machine(host, allowed):
    assert netguard.host_allowed(host) is allowed


def test_a_process_started_with_tools_testenv_on_pythonpath_is_guarded():
    """What every notebook kernel of `make test` gets (the Makefile sets PYTHONPATH)."""
    probe = (
        "import socket, netguard\n"
        "assert netguard.installed()\n"
        "netguard.ORIGINAL['connect'] = lambda *a: print('LEAKED')\n"
        "try:\n"
        "    socket.socket().connect(('203.0.113.9', 443))\n"
        "except netguard.NetworkBlocked as e:\n"
        "    print('BLOCKED', e)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(TESTENV)}
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                            timeout=60, cwd=ROOT / "notebooks")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("BLOCKED attention-claims runs offline"), result.stdout
