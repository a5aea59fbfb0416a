// Internal to daemon/backend: the bpf(2) pieces shared by the query
// (device_programs_v2.cpp) and the repair (device_program_repair.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/device_program_cache.h"
#include "backend/device_programs_v2.h"
#include "core/result.h"

namespace gdw::v2_kernel {

// An owned file descriptor (cgroup directory, program, map, link).
class OwnedFd {
 public:
  explicit OwnedFd(int fd = -1) : fd_(fd) {}
  ~OwnedFd();
  OwnedFd(OwnedFd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  OwnedFd& operator=(OwnedFd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

Result<OwnedFd> open_cgroup(const std::string& dir);

// The cgroups whose programs decide for a container's processes: its own directory
// (subgroup ""), then crun's sub-cgroup of it when that exists (runtime/cgroup_names.h).
struct DeviceCgroup {
  std::string dir;
  std::string subgroup;
};
std::vector<DeviceCgroup> device_cgroups_of(const std::string& container_dir);

struct AttachedIds {
  std::vector<std::uint32_t> ids;
  std::uint32_t attach_flags = 0;  // the cgroup's mode for this attach type
  std::uint64_t revision = 0;      // read with the ids (Linux 6.17+); 0: the kernel keeps none
};

// Program `id`, read from the kernel (not `link` or `subgroup`); nullopt when it is gone.
std::optional<AttachedDeviceProgram> read_program(std::uint32_t id);
// Program ids attached to the cgroup through bpf_links of type BPF_CGROUP_DEVICE: a walk of
// every bpf link on the node (libbpf 1.1 has no link ids in bpf_prog_query).
std::set<std::uint32_t> link_attached_program_ids(const std::string& dir);

// The programs attached to the open cgroup, described (through `cache`); `link` set from
// `link_ids` when given (else false); `ids_out` gets the raw query.
Result<std::vector<AttachedDeviceProgram>> describe_attached(int cgroup_fd, const std::string& dir,
                                                             DeviceProgramCache& cache,
                                                             const std::set<std::uint32_t>* link_ids = nullptr,
                                                             AttachedIds* ids_out = nullptr);

}  // namespace gdw::v2_kernel
