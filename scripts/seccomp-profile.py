#!/usr/bin/env python3
"""Writes deploy/seccomp/tlsrum.json, the container's seccomp profile: the
system calls the systemd unit allows (deploy/tlsrum.service's
SystemCallFilter, groups expanded by `systemd-analyze syscall-filter`), every
other one failing as the unit's SystemCallErrorNumber says. One source: the
unit, whose filter agent/tests/dashboards.rs checks against what the agent
really calls (strace). Rerun after changing the unit; agent/tests/image.rs
checks the file is current.

Container runtimes' default profiles allow bpf() only with CAP_SYS_ADMIN in
older releases (podman 4.3 in Debian 12), which the agent does not get.
"""
import errno
import json
import pathlib
import subprocess
import sys

root = pathlib.Path(__file__).resolve().parent.parent


def unit_values(unit, key):
    return [w for line in unit.splitlines() if line.startswith(key + "=")
            for w in line.split("=", 1)[1].split()]


def expand(name, out):
    if not name.startswith("@"):
        out.add(name)
        return
    text = subprocess.run(["systemd-analyze", "syscall-filter", name],
                          check=True, capture_output=True, text=True).stdout
    for line in text.splitlines()[1:]:
        line = line.strip()
        if line and not line.startswith("#"):
            expand(line, out)


unit = (root / "deploy/tlsrum.service").read_text()
allowed = set()
for f in unit_values(unit, "SystemCallFilter"):
    expand(f, allowed)
errno_name = unit_values(unit, "SystemCallErrorNumber")[0]
profile = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "defaultErrnoRet": getattr(errno, errno_name),
    "syscalls": [{"names": sorted(allowed), "action": "SCMP_ACT_ALLOW"}],
}
out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else root / "deploy/seccomp/tlsrum.json"
out.write_text(json.dumps(profile, indent=1) + "\n")
