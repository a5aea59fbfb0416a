// The bpf(2) calls that read and change the device programs attached to a cgroup
// (BPF_PROG_QUERY, BPF_PROG_ATTACH, BPF_PROG_DETACH for BPF_CGROUP_DEVICE), made here with
// the attr laid out by this file rather than through libbpf 1.1 and Debian 12's headers,
// which predate the fields Linux 6.17 added:
// - the query returns the cgroup's revision for the attach type (`query.revision`): a
//   count the kernel raises on every attach, replace and detach there, from 1 for a new
//   cgroup; a kernel without revisions leaves the field 0;
// - an attach or detach may carry `expected_revision`: the kernel refuses it with ESTALE
//   when the cgroup's programs changed since the query that read that revision (0: no
//   check, what an older kernel requires).
// Every call passes a whole, zeroed attr of kAttrSize bytes: from 6.17 the query writes
// `revision` into the caller's attr whatever size it was given.
// The offsets are those of include/uapi/linux/bpf.h since 6.17; those an older header also
// has are checked against it at compile time (cgroup_bpf_calls.cpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace gdw::cgroup_bpf {

// Larger than any kernel's union bpf_attr so far (6.18: 152 bytes); the bytes past the
// kernel's own size are zero, which every kernel accepts.
inline constexpr std::size_t kAttrSize = 256;

// A union bpf_attr as bytes, zeroed.
struct Attr {
  alignas(8) std::array<std::uint8_t, kAttrSize> bytes{};
  void put32(std::size_t at, std::uint32_t v) { std::memcpy(bytes.data() + at, &v, sizeof v); }
  void put64(std::size_t at, std::uint64_t v) { std::memcpy(bytes.data() + at, &v, sizeof v); }
  std::uint32_t get32(std::size_t at) const {
    std::uint32_t v;
    std::memcpy(&v, bytes.data() + at, sizeof v);
    return v;
  }
  std::uint64_t get64(std::size_t at) const {
    std::uint64_t v;
    std::memcpy(&v, bytes.data() + at, sizeof v);
    return v;
  }
};

// Offsets in the attr (upstream include/uapi/linux/bpf.h, 6.17+).
namespace query_at {  // BPF_PROG_QUERY
inline constexpr std::size_t kTargetFd = 0, kAttachType = 4, kQueryFlags = 8, kAttachFlags = 12, kProgIds = 16,
                             kProgCnt = 24, kProgAttachFlags = 32, kLinkIds = 40, kLinkAttachFlags = 48,
                             kRevision = 56;
}
namespace attach_at {  // BPF_PROG_ATTACH, BPF_PROG_DETACH
inline constexpr std::size_t kTargetFd = 0, kAttachBpfFd = 4, kAttachType = 8, kAttachFlags = 12,
                             kReplaceBpfFd = 16, kRelativeFd = 20, kExpectedRevision = 24;
}

// The attrs, built (pure: the unit test reads their bytes).
Attr query_attr(int cgroup_fd, std::uint32_t* ids, std::uint32_t room);
// replace_fd < 0: no BPF_F_REPLACE program; expected_revision 0: no check.
Attr attach_attr(int cgroup_fd, int prog_fd, std::uint32_t flags, int replace_fd, std::uint64_t expected_revision);
Attr detach_attr(int cgroup_fd, int prog_fd, std::uint64_t expected_revision);

struct Query {
  std::uint32_t count = 0;         // programs attached (more than `room` on ENOSPC)
  std::uint32_t attach_flags = 0;  // the cgroup's mode for BPF_CGROUP_DEVICE
  std::uint64_t revision = 0;      // 0: the kernel keeps none
};
// The device programs attached directly to the cgroup: up to `room` ids into `ids`.
// Returns 0 or the errno (ENOSPC: more than `room`, `out.count` says how many).
int query_device_programs(int cgroup_fd, std::uint32_t* ids, std::uint32_t room, Query& out);
// Return 0 or the errno (ESTALE: the cgroup changed since `expected_revision` was read).
int attach_device_program(int cgroup_fd, int prog_fd, std::uint32_t flags, int replace_fd,
                          std::uint64_t expected_revision);
int detach_device_program(int cgroup_fd, int prog_fd, std::uint64_t expected_revision);

}  // namespace gdw::cgroup_bpf
