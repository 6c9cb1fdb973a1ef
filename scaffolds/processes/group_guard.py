"""Lead a process group on behalf of a child that may ignore its death signal.

Run as a script (never imported by the package at start-up, so it starts in tens of
milliseconds): ``python group_guard.py GRACE_S -- COMMAND...``. It runs COMMAND in its
own process group and exits with its status. When the guard gets SIGTERM, it passes it
on (to the whole group if its owner is gone, since the SIGTERM was then the owner's death
signal; else to COMMAND), waits up to GRACE_S for the group to end, then SIGKILLs it.

Why: vLLM's API server ignores SIGTERM while it waits for its EngineCore to start, so a
death signal sent to it then was lost and the server outlived its owner. The guard acts
on the signal whatever the child does. :func:`scaffolds.processes.children.popen_owned` uses it
with ``guard=True``.

>>> import subprocess, sys
>>> command = [sys.executable, "-c", "exit(3)"]
>>> subprocess.run([sys.executable, __file__, "5", "--", *command]).returncode
3
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop


def _group_alive() -> bool:
    try:
        os.killpg(os.getpgrp(), 0)
    except ProcessLookupError:
        return False
    # The guard itself is in the group: alive means anyone besides us.
    return _others_in_group()


def _others_in_group() -> bool:
    me, group = os.getpid(), os.getpgrp()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is the state, fields[2] the process group; zombies are already dead.
        if int(fields[2]) == group and fields[0] != "Z":
            return True
    return False


def _stop(child: subprocess.Popen[bytes], owner: int, grace_s: float) -> int:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.getppid() != owner:  # the owner died: nobody else has told the group to stop
        os.killpg(os.getpgrp(), signal.SIGTERM)
    else:  # the owner stopped the group, or only us (``Popen.terminate``): pass it on
        child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if child.poll() is not None and not _group_alive():
            return child.returncode
        time.sleep(0.1)
    os.killpg(os.getpgrp(), signal.SIGKILL)  # the guard goes with its group
    return 1  # pragma: no cover


def main(argv: list[str]) -> int:
    grace_s, separator, *command = argv
    if separator != "--" or not command:
        sys.stderr.write("usage: group_guard.py GRACE_S -- COMMAND...\n")
        return 2
    owner = os.getppid()
    signal.signal(signal.SIGTERM, _raise_stop)
    # A SIGTERM that comes while the child starts is held until the child exists.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    child = subprocess.Popen(command)
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        return child.wait()
    except _Stop:
        return _stop(child, owner, float(grace_s))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
