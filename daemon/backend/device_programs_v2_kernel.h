// Internal to daemon/backend: the bpf(2) pieces shared by the query
// (device_programs_v2.cpp) and the repair (device_program_repair.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backend/device_programs_v2.h"
#include "core/result.h"

namespace gdw::v2_kernel {

std::string errno_text(int err);

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
};

// The programs attached to the open cgroup, described; `ids_out` gets the raw query.
Result<std::vector<AttachedDeviceProgram>> describe_attached(int cgroup_fd, const std::string& dir,
                                                             AttachedIds* ids_out = nullptr);

}  // namespace gdw::v2_kernel
