"""Run as ``python -m tests.support.ray_listening TEMP_DIR``: start a one-node Ray cluster the way
``ray start --head`` does (head node, no dashboard, 127.0.0.1 as the node address, in this process'
environment), wait for its processes to open their ports, and print as JSON the TCP sockets that
its processes listen on (``[[address, port, process name], ...]``, from /proc), then stop it. Only
the processes this one started are looked at, and ``ray.shutdown`` stops exactly those."""

from __future__ import annotations

import ipaddress
import json
import os
import sys
import time
from pathlib import Path

SETTLE_S = 10.0
START_ATTEMPTS = 3


def _listening() -> dict[str, tuple[str, int]]:
    """Socket inode -> (address, port) of every listening TCP socket of this host (IPv4-mapped
    IPv6 addresses written as IPv4)."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":
                continue
            address, port = fields[1].split(":")
            # /proc writes the address as 32-bit words in host (little-endian) order
            raw = b"".join(bytes.fromhex(address[i : i + 8])[::-1] for i in range(0, len(address), 8))
            ip = ipaddress.ip_address(raw)
            mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
            text = str(mapped or ip)
            found[fields[9]] = (text, int(port, 16))
    return found


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(stat[1]), []).append(int(entry))
    todo, seen = [root], []
    while todo:
        pid = todo.pop()
        seen.append(pid)
        todo += children.get(pid, [])
    return seen


def main(temp_dir: str) -> None:
    import ray

    for attempt in range(START_ATTEMPTS):
        try:
            ray.init(num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1", _temp_dir=temp_dir,
                     configure_logging=False, log_to_driver=False)
            break
        # Ray gives its raylet 30 s to register, which a loaded machine can miss
        except Exception:
            ray.shutdown()
            if attempt == START_ATTEMPTS - 1:
                raise
    try:
        time.sleep(SETTLE_S)
        sockets = _listening()
        rows = []
        for pid in _descendants(os.getpid()):
            try:
                name = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
                links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            except OSError:
                continue
            for link in links:
                inode = link[len("socket:["):-1] if link.startswith("socket:[") else None
                if inode in sockets:
                    rows.append([*sockets[inode], name])
    finally:
        ray.shutdown()
    print(json.dumps(rows))


if __name__ == "__main__":
    main(sys.argv[1])
