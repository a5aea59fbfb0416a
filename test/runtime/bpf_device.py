"""cgroup v2 device programs with raw bpf() calls (ctypes), for the real-runtime matrix: what is
attached to a container's cgroup, and libnvidia-container's grant on v2 (its nvcgo
AddDeviceRules), as test/support/device_program_tools.cpp `nvidia_style_grant` does it in C++:
for each program attached to the cgroup, load a copy of its translated instructions with
"allow the GPU nodes" blocks in front, attach the copy (BPF_F_ALLOW_MULTI, unnamed) and detach
the old one.

x86_64 only (the bpf syscall number); every attr is passed full-size and zeroed (kernels from
6.17 write a query's revision past a short one).
"""

import ctypes
import errno
import os
import struct

SYS_BPF = 321  # x86_64
BPF_PROG_LOAD = 5
BPF_PROG_ATTACH = 8
BPF_PROG_DETACH = 9
BPF_PROG_GET_FD_BY_ID = 13
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_PROG_QUERY = 16
BPF_PROG_TYPE_CGROUP_DEVICE = 15
BPF_CGROUP_DEVICE = 6
BPF_F_ALLOW_MULTI = 2
ATTR_SIZE = 256  # >= sizeof(union bpf_attr) of any kernel here; the tail stays zero
INFO_SIZE = 256  # >= sizeof(struct bpf_prog_info)
MAX_PROGS = 64   # BPF_CGROUP_MAX_PROGS

# bpf_cgroup_dev_ctx access bits and device types.
ACC_MKNOD, ACC_READ, ACC_WRITE = 1, 2, 4
DEV_BLOCK, DEV_CHAR = 1, 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class BpfError(OSError):
    pass


def _bpf(cmd, attr):
    """attr: a ctypes buffer of ATTR_SIZE bytes. Returns the result or raises BpfError."""
    r = _libc.syscall(ctypes.c_long(SYS_BPF), ctypes.c_long(cmd), ctypes.byref(attr), ctypes.c_long(len(attr)))
    if r < 0:
        e = ctypes.get_errno()
        raise BpfError(e, os.strerror(e))
    return r


def _attr(fmt, *values):
    buf = ctypes.create_string_buffer(ATTR_SIZE)
    struct.pack_into(fmt, buf, 0, *values)
    return buf


def _addr(buf):
    return ctypes.addressof(buf)


def _open_cgroup(cgroup_dir):
    return os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def query_ids(cgroup_dir):
    """Ids of the device programs attached to the cgroup itself, in the kernel's order."""
    cg = _open_cgroup(cgroup_dir)
    try:
        ids = (ctypes.c_uint32 * MAX_PROGS)()
        # target_fd, attach_type, query_flags, attach_flags, prog_ids, prog_cnt
        attr = _attr("=IIIIQI", cg, BPF_CGROUP_DEVICE, 0, 0, _addr(ids), MAX_PROGS)
        _bpf(BPF_PROG_QUERY, attr)
        count = struct.unpack_from("=I", attr, 24)[0]
        return list(ids[:count])
    finally:
        os.close(cg)


def prog_fd_by_id(prog_id):
    return _bpf(BPF_PROG_GET_FD_BY_ID, _attr("=I", prog_id))


def _info(fd, xlated_len=0, xlated_buf=None):
    info = ctypes.create_string_buffer(INFO_SIZE)
    if xlated_buf is not None:
        struct.pack_into("=I", info, 20, xlated_len)       # xlated_prog_len
        struct.pack_into("=Q", info, 32, _addr(xlated_buf))  # xlated_prog_insns
    _bpf(BPF_OBJ_GET_INFO_BY_FD, _attr("=IIQ", fd, INFO_SIZE, _addr(info)))
    return info


def prog_name(fd):
    return bytes(_info(fd)[64:80]).split(b"\0", 1)[0].decode(errors="replace")


def xlated_code(fd):
    """The program's translated instructions (bytes, 8 per instruction)."""
    length = struct.unpack_from("=I", _info(fd), 20)[0]
    if length == 0:
        raise BpfError(errno.EIO, "no translated instructions")
    code = ctypes.create_string_buffer(length)
    _info(fd, length, code)
    return bytes(code.raw[:length])


def attached(cgroup_dir):
    """[(id, name)] of the programs attached to the cgroup ("" for an unnamed one)."""
    out = []
    for prog_id in query_ids(cgroup_dir):
        try:
            fd = prog_fd_by_id(prog_id)
        except BpfError:
            out.append((prog_id, "?"))
            continue
        try:
            out.append((prog_id, prog_name(fd)))
        finally:
            os.close(fd)
    return out


def load(code, name=""):
    """Loads `code` (bytes) as a cgroup_device program; returns its fd."""
    insns = ctypes.create_string_buffer(code, len(code))
    license_ = ctypes.create_string_buffer(b"GPL")
    attr = _attr("=IIQQIIQII16s", BPF_PROG_TYPE_CGROUP_DEVICE, len(code) // 8, _addr(insns), _addr(license_),
                 0, 0, 0, 0, 0, name.encode()[:15])
    return _bpf(BPF_PROG_LOAD, attr)


def attach_multi(prog_fd, cgroup_dir):
    cg = _open_cgroup(cgroup_dir)
    try:
        _bpf(BPF_PROG_ATTACH, _attr("=IIII", cg, prog_fd, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI))
    finally:
        os.close(cg)


def detach(prog_fd, cgroup_dir):
    cg = _open_cgroup(cgroup_dir)
    try:
        _bpf(BPF_PROG_DETACH, _attr("=IIII", cg, prog_fd, BPF_CGROUP_DEVICE, 0))
    finally:
        os.close(cg)


# --- instructions ----------------------------------------------------------------------

def insn(code, dst=0, src=0, off=0, imm=0):
    return struct.pack("=BBhi", code, (src << 4) | dst, off, imm)


LDX_MEM_W = 0x61    # BPF_LDX | BPF_MEM | BPF_W
MOV64_X = 0xbf      # BPF_ALU64 | BPF_MOV | BPF_X
MOV64_K = 0xb7
AND64_K = 0x57
RSH64_K = 0x77
JNE_K = 0x55        # BPF_JMP | BPF_JNE | BPF_K
EXIT = 0x95


def allow_prefix(nodes, access=ACC_READ | ACC_WRITE):
    """What libnvidia-container puts in front of a program it copies: allow `access` to each char
    node (major, minor), fall through for everything else; r1 (the context) stays for the code
    behind it. Mirrors assemble_allow_prefix (test/support/foreign_device_program.cpp)."""
    code = [insn(LDX_MEM_W, 2, 1, 0),       # r2 = ctx->access_type
            insn(MOV64_X, 3, 2),
            insn(AND64_K, 3, imm=0xffff),   # r3 = device type
            insn(RSH64_K, 2, imm=16),       # r2 = requested access
            insn(LDX_MEM_W, 4, 1, 4),       # r4 = major
            insn(LDX_MEM_W, 5, 1, 8)]       # r5 = minor
    for major, minor in nodes:
        # 3 compares (type, major, minor), r0 = access outside the rule, compare, allow, exit.
        block = [(JNE_K, 3, DEV_CHAR), (JNE_K, 4, major), (JNE_K, 5, minor)]
        n = len(block) + 5
        for i, (op, reg, value) in enumerate(block):
            code.append(insn(op, reg, off=n - i - 1, imm=value))
        code += [insn(MOV64_X, 0, 2),
                 insn(AND64_K, 0, imm=~access & 7),
                 insn(JNE_K, 0, off=2, imm=0),
                 insn(MOV64_K, 0, imm=1),
                 insn(EXIT)]
    return b"".join(code)


def nvidia_style_grant(cgroup_dir, nodes):
    """libnvidia-container's v2 grant of rw on `nodes` [(major, minor)]. Returns 0 or the errno
    of the step that failed (ENOENT: a program was swapped or detached meanwhile)."""
    prefix = allow_prefix(nodes)
    try:
        ids = query_ids(cgroup_dir)
    except (BpfError, OSError) as e:
        return e.errno
    for prog_id in ids:
        old = copy = -1
        try:
            old = prog_fd_by_id(prog_id)
            copy = load(prefix + xlated_code(old))
            attach_multi(copy, cgroup_dir)
            detach(old, cgroup_dir)
        except (BpfError, OSError) as e:
            return e.errno
        finally:
            for fd in (old, copy):
                if fd >= 0:
                    os.close(fd)
    return 0
