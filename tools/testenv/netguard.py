"""Refuse every network connection except to this machine (loopback and Unix sockets).

The book must build and test offline: nothing may download anything at test or run time.
:func:`install` patches the Python socket layer so that an accidental download fails at
once, with a one-line reason, *before* any packet leaves the machine:

* ``socket.socket.connect`` / ``connect_ex`` / ``sendto`` to an address that is not loopback
  (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104) raise :class:`NetworkBlocked`; ``AF_UNIX`` and the
  other non-IP families are left alone (they never leave the machine);
* ``socket.getaddrinfo`` / ``gethostbyname`` / ``gethostbyname_ex`` of a host name other than
  localhost or this machine's own name raise :class:`NetworkBlocked`, so no DNS query is sent
  either. Numeric addresses resolve as usual (no traffic) and are checked at ``connect``.

ZeroMQ (the Jupyter kernel protocol) does not use Python sockets and binds to 127.0.0.1 anyway.
``sitecustomize.py`` beside this file installs the guard in every Python process started with
this folder on ``PYTHONPATH`` (the Makefile does that for tests, notebook kernels and the book
build); ``tests/conftest.py`` also installs it around every test with ``monkeypatch``.
"""

from __future__ import annotations

import ipaddress
import socket

#: The unpatched functions, by name. The guards call these once an address is allowed.
ORIGINAL = {
    "connect": socket.socket.connect,
    "connect_ex": socket.socket.connect_ex,
    "sendto": socket.socket.sendto,
    "getaddrinfo": socket.getaddrinfo,
    "gethostbyname": socket.gethostbyname,
    "gethostbyname_ex": socket.gethostbyname_ex,
}

LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


class NetworkBlocked(RuntimeError):
    """A connection or name lookup that would leave the machine."""


def _own_names() -> set[str]:
    try:
        return {socket.gethostname().lower()}
    except OSError:
        return set()


def _is_loopback_ip(host: str) -> bool | None:
    """True/False for a numeric IP address, None for a host name."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])   # strip an IPv6 zone id
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def host_allowed(host) -> bool:
    """Whether a host (numeric address or name) is this machine."""
    if host is None:
        return True                       # getaddrinfo(None, port): the local wildcard
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    host = str(host).strip().lower().rstrip(".")
    if host in ("", "<broadcast>"):
        return host == ""
    loopback = _is_loopback_ip(host)
    if loopback is not None:
        return loopback
    return host in LOCAL_NAMES or host in _own_names()


def _check_address(sock: socket.socket, address, action: str) -> None:
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return                            # AF_UNIX, AF_NETLINK …: never leave the machine
    host = address[0] if isinstance(address, tuple) and address else address
    if not host_allowed(host):
        raise NetworkBlocked(
            f"attention-claims runs offline: {action} to {address!r} refused "
            "(only loopback is allowed; see tools/testenv/netguard.py)"
        )


def _check_name(host, action: str) -> None:
    if isinstance(host, (str, bytes)):
        text = host.decode("ascii", "replace") if isinstance(host, bytes) else host
        if _is_loopback_ip(text) is not None:
            return                        # numeric: no DNS query; checked at connect
    if not host_allowed(host):
        raise NetworkBlocked(
            f"attention-claims runs offline: {action}({host!r}) refused "
            "(a name lookup would query DNS; only localhost is allowed)"
        )


def guarded_connect(self, address):
    _check_address(self, address, "connect")
    return ORIGINAL["connect"](self, address)


def guarded_connect_ex(self, address):
    _check_address(self, address, "connect")
    return ORIGINAL["connect_ex"](self, address)


def guarded_sendto(self, data, *args):
    address = args[-1] if args else None
    if address is not None:
        _check_address(self, address, "sendto")
    return ORIGINAL["sendto"](self, data, *args)


def guarded_getaddrinfo(host, *args, **kwargs):
    _check_name(host, "getaddrinfo")
    return ORIGINAL["getaddrinfo"](host, *args, **kwargs)


def guarded_gethostbyname(host):
    _check_name(host, "gethostbyname")
    return ORIGINAL["gethostbyname"](host)


def guarded_gethostbyname_ex(host):
    _check_name(host, "gethostbyname_ex")
    return ORIGINAL["gethostbyname_ex"](host)


#: (owner, attribute, guard) for every patched function.
PATCHES = (
    (socket.socket, "connect", guarded_connect),
    (socket.socket, "connect_ex", guarded_connect_ex),
    (socket.socket, "sendto", guarded_sendto),
    (socket, "getaddrinfo", guarded_getaddrinfo),
    (socket, "gethostbyname", guarded_gethostbyname),
    (socket, "gethostbyname_ex", guarded_gethostbyname_ex),
)


def install() -> None:
    """Patch the socket layer for the rest of this process (idempotent)."""
    for owner, name, guard in PATCHES:
        setattr(owner, name, guard)


def installed() -> bool:
    """Whether every guard is in place."""
    return all(getattr(owner, name) is guard for owner, name, guard in PATCHES)
