"""A point-to-point IP link between two network namespaces through this process, with a delay.

``python -m tests.agent.tun_link NS_A DEV_A NS_B DEV_B DELAY_S``: makes a TUN device ``DEV_A`` in
namespace ``NS_A`` and ``DEV_B`` in ``NS_B`` (the caller gives them addresses), prints ``ready``,
then forwards every IP packet between them, holding those from A to B for ``DELAY_S`` seconds:
what ``tc qdisc add dev DEV netem delay 20ms`` does on a veth, for kernels built without
``sch_netem`` (this machine's). The devices vanish when the process ends. Test helper only;
Linux, root.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import heapq
import os
import selectors
import struct
import sys
import time

CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000


def _enter(ns: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {ns}")
    finally:
        os.close(fd)


def _tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def main(argv: list[str]) -> int:
    ns_a, dev_a, ns_b, dev_b, delay = argv[0], argv[1], argv[2], argv[3], float(argv[4])
    _enter(ns_a)
    fd_a = _tun(dev_a)
    _enter(ns_b)
    fd_b = _tun(dev_b)
    print("ready", flush=True)
    held: list[tuple[float, int, bytes]] = []  # (release time, order, packet) from A to B
    order = 0
    sel = selectors.DefaultSelector()
    sel.register(fd_a, selectors.EVENT_READ, "a")
    sel.register(fd_b, selectors.EVENT_READ, "b")
    while True:
        timeout = max(0.0, held[0][0] - time.monotonic()) if held else None
        for key, _ in sel.select(timeout):
            try:
                packet = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            if key.data == "a":
                order += 1
                heapq.heappush(held, (time.monotonic() + delay, order, packet))
            else:
                _write(fd_a, packet)
        while held and held[0][0] <= time.monotonic():
            _write(fd_b, heapq.heappop(held)[2])


def _write(fd: int, packet: bytes) -> None:
    with contextlib.suppress(OSError):  # device not up yet, queue full: lost, as on a wire
        os.write(fd, packet)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
