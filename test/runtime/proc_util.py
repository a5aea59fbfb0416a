"""Small process and file helpers the runtime matrix's modules share."""

import os
import signal


def kill_quietly(pid, sig=signal.SIGKILL):
    """Signals `pid` (one of ours, by PID); a process already gone is fine."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def file_tail(path, lines):
    """The last `lines` lines of a log file, or "" when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return b"\n".join(f.read().splitlines()[-lines:]).decode(errors="replace")
    except OSError:
        return ""
