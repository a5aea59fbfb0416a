// A cgroup v2 device program as another manager (runc, systemd) would build it: raw
// instructions assembled here, independent of bpf/device_filter.bpf.c, so tests can stand
// up "the runtime's program" and "systemd's program after a reload".
#pragma once

#include <linux/bpf.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/oci_config.h"

namespace gdw::test {

// The program for `rules` in runc's semantics (last match wins, no match denies).
std::vector<bpf_insn> assemble_device_filter(const std::vector<OciDeviceCgroupRule>& rules);
// What libnvidia-container puts in front of a program it copies: allow `allowed` (each
// with its access) and fall through to whatever follows for every other access. Keeps r1
// (the context) for the code behind it.
std::vector<bpf_insn> assemble_allow_prefix(const std::vector<DeviceRule>& allowed);

// A loaded program; the fd is closed at the end (an attached program stays attached).
struct ForeignProgram {
  int fd = -1;
  std::uint32_t id = 0;
  int load_errno = 0;
  ForeignProgram() = default;
  // Rules in runc's semantics (last match wins, no match denies); `name` as bpftool shows it.
  ForeignProgram(const std::string& name, const std::vector<OciDeviceCgroupRule>& rules);
  // Instructions as they are (a copy of another program's); `name` may be empty.
  ForeignProgram(const std::string& name, const std::vector<bpf_insn>& insns);
  ~ForeignProgram();
  ForeignProgram(ForeignProgram&& o) noexcept : fd(o.fd), id(o.id), load_errno(o.load_errno) { o.fd = -1; }
  ForeignProgram(const ForeignProgram&) = delete;
  ForeignProgram& operator=(const ForeignProgram&) = delete;
  // bpf_prog_attach with BPF_F_ALLOW_MULTI on a cgroup directory; returns errno (0 = ok).
  int attach(const std::string& cgroup_dir) const;

 private:
  void load(const std::string& name, const std::vector<bpf_insn>& insns);
};

// Why a test of cgroup v2 device programs cannot run here: no root and writable cgroup2 at
// /sys/fs/cgroup/unified, or BPF_PROG_LOAD refused. Empty when it can.
std::string v2_device_programs_unavailable();

}  // namespace gdw::test
