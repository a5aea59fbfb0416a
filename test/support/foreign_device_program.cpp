#include "support/foreign_device_program.h"

#include <bpf/bpf.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "backend/device_program_code.h"
#include "support/cgroup_sandbox.h"

namespace gdw::test {
namespace {

enum { R0 = 0, R1 = 1, R2 = 2, R3 = 3, R4 = 4, R5 = 5 };

// r2 = requested access, r3 = device type, r4 = major, r5 = minor; r1 stays the context.
std::vector<bpf_insn> load_context() {
  return {
      insn(BPF_LDX | BPF_MEM | BPF_W, R2, R1, 0, 0),  // r2 = ctx->access_type
      insn(BPF_ALU64 | BPF_MOV | BPF_X, R3, R2, 0, 0),
      insn(BPF_ALU64 | BPF_AND | BPF_K, R3, 0, 0, 0xffff),  // r3 = device type
      insn(BPF_ALU64 | BPF_RSH | BPF_K, R2, 0, 0, 16),      // r2 = requested access
      insn(BPF_LDX | BPF_MEM | BPF_W, R4, R1, 4, 0),        // r4 = major
      insn(BPF_LDX | BPF_MEM | BPF_W, R5, R1, 8, 0),        // r5 = minor
  };
}

// Returns `verdict` when the device matches `r` and the requested access is within its
// access; otherwise falls through to the instruction after the block.
std::vector<bpf_insn> rule_block(const DeviceRule& r, bool verdict) {
  std::vector<bpf_insn> block;
  std::vector<std::size_t> skips;  // jumps to the end of this block
  auto skip_unless_equal = [&](int reg, std::int32_t value) {
    skips.push_back(block.size());
    block.push_back(insn(BPF_JMP | BPF_JNE | BPF_K, reg, 0, 0, value));
  };
  if (r.type != DeviceType::kAll) skip_unless_equal(R3, r.type == DeviceType::kChar ? 2 : 1);
  if (r.major != kAnyNumber) skip_unless_equal(R4, static_cast<std::int32_t>(r.major));
  if (r.minor != kAnyNumber) skip_unless_equal(R5, static_cast<std::int32_t>(r.minor));
  block.push_back(insn(BPF_ALU64 | BPF_MOV | BPF_X, R0, R2, 0, 0));
  block.push_back(insn(BPF_ALU64 | BPF_AND | BPF_K, R0, 0, 0, ~r.access & kAccessAll));
  skip_unless_equal(R0, 0);
  block.push_back(insn(BPF_ALU64 | BPF_MOV | BPF_K, R0, 0, 0, verdict ? 1 : 0));
  block.push_back(insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  for (std::size_t at : skips) block[at].off = static_cast<std::int16_t>(block.size() - at - 1);
  return block;
}

}  // namespace

std::vector<bpf_insn> assemble_device_filter(const std::vector<OciDeviceCgroupRule>& rules) {
  std::vector<bpf_insn> prog = load_context();
  for (auto it = rules.rbegin(); it != rules.rend(); ++it) {
    auto block = rule_block(it->rule, it->allow);
    prog.insert(prog.end(), block.begin(), block.end());
  }
  prog.push_back(insn(BPF_ALU64 | BPF_MOV | BPF_K, R0, 0, 0, 0));
  prog.push_back(insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  return prog;
}

std::vector<bpf_insn> assemble_allow_prefix(const std::vector<DeviceRule>& allowed) {
  std::vector<bpf_insn> prog = load_context();
  for (const auto& r : allowed) {
    auto block = rule_block(r, true);
    prog.insert(prog.end(), block.begin(), block.end());
  }
  return prog;
}

ForeignProgram::ForeignProgram(const std::string& name, const std::vector<OciDeviceCgroupRule>& rules) {
  load(name, assemble_device_filter(rules));
}

ForeignProgram::ForeignProgram(const std::string& name, const std::vector<bpf_insn>& insns) { load(name, insns); }

void ForeignProgram::load(const std::string& name, const std::vector<bpf_insn>& insns) {
  fd = bpf_prog_load(BPF_PROG_TYPE_CGROUP_DEVICE, name.empty() ? nullptr : name.c_str(), "GPL", insns.data(),
                     insns.size(), nullptr);
  if (fd < 0) {
    load_errno = errno;
    return;
  }
  bpf_prog_info info{};
  std::uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) id = info.id;
}

ForeignProgram::~ForeignProgram() {
  if (fd >= 0) ::close(fd);
}

int ForeignProgram::attach(const std::string& cgroup_dir) const {
  int cg = ::open(cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cg < 0) return errno;
  int r = bpf_prog_attach(fd, cg, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI);
  int err = r == 0 ? 0 : errno;
  ::close(cg);
  return err;
}

std::string v2_device_programs_unavailable() {
  if (!CgroupSandbox::available("unified")) return "needs root and a writable cgroup2 hierarchy at " + cgroup2_root();
  const OciDeviceCgroupRule deny_all{false, DeviceRule{DeviceType::kAll, kAnyNumber, kAnyNumber, kAccessAll}};
  ForeignProgram probe("", {deny_all});
  if (probe.fd < 0) return std::string("BPF_PROG_LOAD refused: ") + std::strerror(probe.load_errno);
  return "";
}

}  // namespace gdw::test
