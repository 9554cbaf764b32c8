"""The helper of :mod:`ssptk.launch.netns`, run as ``unshare --user --map-root-user --net -- python -I -S
_netns_helper.py hold``.

It runs on the critical path of every cluster start, so it imports only a few cheap standard modules
(``python -I -S`` without ``logging``, ``subprocess`` or ``dataclasses`` starts in ~15 ms, not ~300).

It brings ``lo`` up (a fresh network namespace has it down; ``SIOCSIFFLAGS`` on a socket, so no
iproute2 is needed), prints the ready line, and waits for EOF on stdin: by then the launcher has opened
the namespace files (which keep the namespace alive), or has died.
"""
import _socket  # not ``socket``: its enum import alone costs more than the rest of the helper
import fcntl
import struct
import sys

#: the line it prints once the namespace is up (ssptk.launch.netns reads it from here: this script imports no ssptk)
NETNS_READY = "SSPTK_NETNS_READY"
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def loopback_up():
    s = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    try:
        ifr = struct.pack("16sH22x", b"lo", 0)  # struct ifreq: name, flags, padding to 40 bytes
        flags = struct.unpack("16sH22x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, ifr))[1]
        if not flags & IFF_UP:
            fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
    finally:
        s.close()


def hold():
    loopback_up()
    sys.stdout.write(NETNS_READY + "\n")
    sys.stdout.flush()
    sys.stdin.buffer.read()
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["hold"]:
        sys.exit(hold())
    print("usage: _netns_helper.py hold", file=sys.stderr)
    sys.exit(2)
