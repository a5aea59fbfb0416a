#!/usr/bin/env python3
"""The baseline bench/storm compares gpu-devwatch against: a careful hand-written inotify fixer.

    python_fixer.py TARGETS.json

TARGETS.json maps each GPU container's cgroup v1 devices directory to the rules it must
have, e.g. {"/sys/fs/cgroup/devices/kubepods/pod.../<id>": ["c 195:0 rw", "c 195:255 rw"]}.
(The bench writes it: a script like this would get it from somewhere; how is not measured.)

A revoker writes devices.deny (or re-applies a spec: deny `a`, then allows), so both files
are watched with inotify. After each wake-up every queued event is drained in large reads,
then devices.list is read once per container that had an event, and the rules it lacks are
written to devices.allow. Python 3 standard library only (libc's inotify through ctypes).
"""
import ctypes
import ctypes.util
import errno
import json
import os
import select
import struct
import sys

IN_MODIFY = 0x00000002
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then `len` bytes of name)

libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
libc.inotify_init1.argtypes = [ctypes.c_int]
libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]


def log(message):
    print("python_fixer: " + message, file=sys.stderr, flush=True)


def parse_rule(text):
    """'c 195:0 rw' -> ('c', '195', '0', 'rw'); devices.list uses the same form ('a *:* rwm')."""
    kind, numbers, access = text.split()
    major, minor = numbers.split(":")
    return kind, major, minor, access


def covers(entry, want):
    kind, major, minor, access = entry
    want_kind, want_major, want_minor, want_access = want
    return ((kind == "a" or kind == want_kind) and major in ("*", want_major) and minor in ("*", want_minor)
            and set(want_access) <= set(access))


class Container:
    def __init__(self, directory, rules):
        self.directory = directory
        self.wanted = [(rule, parse_rule(rule)) for rule in rules]
        # Kept open: one pread of devices.list and one write per missing rule per repair.
        self.list_fd = os.open(os.path.join(directory, "devices.list"), os.O_RDONLY | os.O_CLOEXEC)
        self.allow_fd = os.open(os.path.join(directory, "devices.allow"), os.O_WRONLY | os.O_CLOEXEC)
        self.gone = False

    def missing(self, listing):
        entries = [parse_rule(line) for line in listing.splitlines() if line.strip()]
        return [rule for rule, want in self.wanted if not any(covers(e, want) for e in entries)]

    def repair(self):
        if self.gone:
            return
        try:
            listing = os.pread(self.list_fd, 1 << 16, 0).decode()
        except OSError as e:
            if e.errno in (errno.ENODEV, errno.ENOENT):
                self.close()
                return
            raise
        for rule in self.missing(listing):
            try:
                os.write(self.allow_fd, rule.encode())
            except OSError as e:
                log("cannot allow %s in %s: %s" % (rule, self.directory, e.strerror))

    def close(self):
        self.gone = True
        for fd in (self.list_fd, self.allow_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def drain(inotify_fd, by_wd, containers):
    """Reads every queued event; returns the containers to look at, in first-event order."""
    dirty = {}
    while True:
        try:
            data = os.read(inotify_fd, 1 << 20)
        except BlockingIOError:
            return list(dirty)
        offset = 0
        while offset < len(data):
            wd, mask, _cookie, name_len = EVENT.unpack_from(data, offset)
            offset += EVENT.size + name_len
            if mask & IN_Q_OVERFLOW:
                log("inotify queue overflowed: checking every container")
                dirty.update((c, None) for c in containers)
            elif mask & IN_IGNORED:
                gone = by_wd.pop(wd, None)
                if gone is not None:
                    gone.close()
            elif wd in by_wd:
                dirty[by_wd[wd]] = None


def main():
    if len(sys.argv) != 2:
        log("usage: python_fixer.py TARGETS.json")
        return 2
    with open(sys.argv[1]) as f:
        targets = json.load(f)
    inotify_fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if inotify_fd < 0:
        log("inotify_init1: " + os.strerror(ctypes.get_errno()))
        return 1
    by_wd = {}
    containers = []
    for directory, rules in targets.items():
        container = Container(directory, rules)
        containers.append(container)
        for name in ("devices.allow", "devices.deny"):
            wd = libc.inotify_add_watch(inotify_fd, os.path.join(directory, name).encode(), IN_MODIFY)
            if wd < 0:
                log("inotify_add_watch %s/%s: %s" % (directory, name, os.strerror(ctypes.get_errno())))
                return 1
            by_wd[wd] = container
    for container in containers:
        container.repair()
    print("python_fixer: watching %d containers, ready" % len(containers), flush=True)
    poller = select.poll()
    poller.register(inotify_fd, select.POLLIN)
    while True:
        poller.poll()
        for container in drain(inotify_fd, by_wd, containers):
            container.repair()


if __name__ == "__main__":
    sys.exit(main())
