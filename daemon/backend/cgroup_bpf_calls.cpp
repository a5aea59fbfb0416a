#include "backend/cgroup_bpf_calls.h"

#include <linux/bpf.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace gdw::cgroup_bpf {

// The fields an older header (Debian 12's linux-libc-dev, 6.1) has sit where this file puts
// them; the ones it lacks follow upstream's layout after them.
static_assert(sizeof(union bpf_attr) <= kAttrSize);
static_assert(offsetof(union bpf_attr, query.target_fd) == query_at::kTargetFd);
static_assert(offsetof(union bpf_attr, query.attach_type) == query_at::kAttachType);
static_assert(offsetof(union bpf_attr, query.query_flags) == query_at::kQueryFlags);
static_assert(offsetof(union bpf_attr, query.attach_flags) == query_at::kAttachFlags);
static_assert(offsetof(union bpf_attr, query.prog_ids) == query_at::kProgIds);
static_assert(offsetof(union bpf_attr, query.prog_cnt) == query_at::kProgCnt);
static_assert(offsetof(union bpf_attr, query.prog_attach_flags) == query_at::kProgAttachFlags);
static_assert(offsetof(union bpf_attr, target_fd) == attach_at::kTargetFd);
static_assert(offsetof(union bpf_attr, attach_bpf_fd) == attach_at::kAttachBpfFd);
static_assert(offsetof(union bpf_attr, attach_type) == attach_at::kAttachType);
static_assert(offsetof(union bpf_attr, attach_flags) == attach_at::kAttachFlags);
static_assert(offsetof(union bpf_attr, replace_bpf_fd) == attach_at::kReplaceBpfFd);
// Upstream: __aligned_u64 link_ids, link_attach_flags, then __u64 revision after
// prog_attach_flags; a union of relative_fd/relative_id, then __u64 expected_revision after
// replace_bpf_fd (8-aligned).
static_assert(query_at::kLinkIds == query_at::kProgAttachFlags + 8 && query_at::kRevision == query_at::kLinkIds + 16);
static_assert(attach_at::kRelativeFd == attach_at::kReplaceBpfFd + 4 && attach_at::kExpectedRevision % 8 == 0 &&
              attach_at::kExpectedRevision == attach_at::kRelativeFd + 4);

Attr query_attr(int cgroup_fd, std::uint32_t* ids, std::uint32_t room) {
  Attr a;
  a.put32(query_at::kTargetFd, static_cast<std::uint32_t>(cgroup_fd));
  a.put32(query_at::kAttachType, BPF_CGROUP_DEVICE);
  a.put64(query_at::kProgIds, reinterpret_cast<std::uintptr_t>(ids));
  a.put32(query_at::kProgCnt, room);
  return a;
}

Attr attach_attr(int cgroup_fd, int prog_fd, std::uint32_t flags, int replace_fd, std::uint64_t expected_revision) {
  Attr a;
  a.put32(attach_at::kTargetFd, static_cast<std::uint32_t>(cgroup_fd));
  a.put32(attach_at::kAttachBpfFd, static_cast<std::uint32_t>(prog_fd));
  a.put32(attach_at::kAttachType, BPF_CGROUP_DEVICE);
  a.put32(attach_at::kAttachFlags, flags);
  if (replace_fd >= 0) a.put32(attach_at::kReplaceBpfFd, static_cast<std::uint32_t>(replace_fd));
  a.put64(attach_at::kExpectedRevision, expected_revision);
  return a;
}

Attr detach_attr(int cgroup_fd, int prog_fd, std::uint64_t expected_revision) {
  Attr a;
  a.put32(attach_at::kTargetFd, static_cast<std::uint32_t>(cgroup_fd));
  a.put32(attach_at::kAttachBpfFd, static_cast<std::uint32_t>(prog_fd));
  a.put32(attach_at::kAttachType, BPF_CGROUP_DEVICE);
  a.put64(attach_at::kExpectedRevision, expected_revision);
  return a;
}

namespace {

int bpf_call(int cmd, Attr& attr) {
  const long r = ::syscall(__NR_bpf, cmd, attr.bytes.data(), static_cast<unsigned int>(attr.bytes.size()));
  return r < 0 ? errno : 0;
}

}  // namespace

int query_device_programs(int cgroup_fd, std::uint32_t* ids, std::uint32_t room, Query& out) {
  Attr a = query_attr(cgroup_fd, ids, room);
  const int err = bpf_call(BPF_PROG_QUERY, a);
  out.count = a.get32(query_at::kProgCnt);
  out.attach_flags = a.get32(query_at::kAttachFlags);
  out.revision = a.get64(query_at::kRevision);
  return err;
}

int attach_device_program(int cgroup_fd, int prog_fd, std::uint32_t flags, int replace_fd,
                          std::uint64_t expected_revision) {
  Attr a = attach_attr(cgroup_fd, prog_fd, flags, replace_fd, expected_revision);
  return bpf_call(BPF_PROG_ATTACH, a);
}

int detach_device_program(int cgroup_fd, int prog_fd, std::uint64_t expected_revision) {
  Attr a = detach_attr(cgroup_fd, prog_fd, expected_revision);
  return bpf_call(BPF_PROG_DETACH, a);
}

}  // namespace gdw::cgroup_bpf
