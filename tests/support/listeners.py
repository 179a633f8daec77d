"""The listening sockets of a set of processes, read from /proc (no tool needed): each process's
socket inodes (/proc/<pid>/fd) matched with the kernel's TCP tables (/proc/net/tcp, tcp6)."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

LISTEN = "0A"  # the TCP state in /proc/net/tcp


@dataclass(frozen=True)
class Listener:
    pid: int
    command: str
    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    port: int

    @property
    def host(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
        """The address, an IPv4-mapped one (::ffff:a.b.c.d) as IPv4."""
        return getattr(self.address, "ipv4_mapped", None) or self.address

    @property
    def loopback(self) -> bool:
        return self.host.is_loopback

    def __str__(self) -> str:
        return f"{self.command} (pid {self.pid}) on {self.host} port {self.port}"


def _address(hex_address: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """An address of /proc/net/tcp*: 32-bit words in host (little-endian) order, the port."""
    host, port = hex_address.split(":")
    raw = b"".join(bytes.fromhex(host[i:i + 8])[::-1] for i in range(0, len(host), 8))
    return ipaddress.ip_address(raw), int(port, 16)


def _listening() -> dict[int, tuple]:
    """Socket inode -> (address, port) of every listening TCP socket of this network namespace."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == LISTEN:
                found[int(fields[9])] = _address(fields[1])
    return found


def _inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    except OSError:  # gone meanwhile
        pass
    return inodes


def _command(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    return " ".join(a.decode(errors="replace") for a in argv[:4] if a)[:120]


def listeners(pids: set[int]) -> list[Listener]:
    """Every listening TCP socket held by one of ``pids``."""
    table = _listening()
    return [Listener(pid, _command(pid), *table[inode])
            for pid in sorted(pids) for inode in _inodes(pid) if inode in table]


def _parents() -> dict[int, int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def tree(roots: set[int]) -> set[int]:
    """``roots`` and all their descendants."""
    parents = _parents()
    found = set(roots)
    grew = True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in found} - found
        found |= more
        grew = bool(more)
    return found


def environment_holds(pid: int, needle: bytes) -> bool:
    try:
        return needle in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


def stack_processes(stack) -> set[int]:
    """Every process of a running stack (compose/stack.py): those of its PID files, those
    carrying its mark (compose/procs.py: inherited by whatever they start), and all their
    descendants."""
    from compose.procs import MARK

    roots = {pid for pid in stack.status().values() if pid}
    mark = f"@{stack.root}\0".encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and environment_holds(int(entry.name), f"{MARK}=".encode()) \
                and environment_holds(int(entry.name), mark):
            roots.add(int(entry.name))
    return tree(roots)
