// cgroup v2 device programs as instructions: running them, and wrapping them.
//
// Why instructions and not a model of the runtime's rules: whether an attached program
// denies a wanted device must be exact, and the kernel offers no way to ask it
// (BPF_PROG_TEST_RUN answers ENOTSUPP for BPF_PROG_TYPE_CGROUP_DEVICE, checked on 6.18).
// The programs runc, crun and systemd attach are short, loop-free, call no helper and use
// no map: loads from the 12-byte context, ALU, compares, exit. run_device_program()
// executes that subset exactly on the translated instructions the kernel reports
// (BPF_OBJ_GET_INFO_BY_FD xlated_prog_insns); anything else on the path it takes is
// kUnknown, which callers treat as "denies" (the program then gets wrapped, which is safe:
// the wrapper decides as the program did for every other device).
//
// Why a copy of the instructions and not a tail call: a wrapper that tail-calls the
// original through a BPF_MAP_TYPE_PROG_ARRAY stops delegating once the daemon exits,
// because the kernel empties a program array when its last user-space reference goes
// (map_release_uref; checked on 6.18), so it would need a pin in a bpffs. Instead the
// wrapper is one self-contained program: a prologue that allows the wanted devices,
// followed by the original's translated instructions unchanged. Whatever the prologue
// does not allow falls through to the original code with the same context, so for every
// other device the wrapper decides exactly as the original. Programs whose instructions
// cannot be loaded again (helper or subprogram calls, map references) cannot be wrapped;
// not_reloadable() says why.
//
// The prologue starts with two marker instructions (r0 = kWrapperMagic; r0 = count) and
// has a fixed shape, so unwrap_device_program() recovers the wanted set and the wrapped
// code from an attached wrapper: a re-repair wraps the original, never a wrapper.
#pragma once

#include <linux/bpf.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/desired_state.h"
#include "runtime/oci_config.h"

namespace gdw {

using BpfCode = std::vector<bpf_insn>;

enum class Verdict { kAllow, kDeny, kUnknown };
std::string to_string(Verdict v);

// Instructions shared by every copy of one program's description: a look copies a
// description several times on a reaction's path (the cache, the look, the plan), and the
// instructions are its largest part. Immutable once set; reads as a `const BpfCode&`.
class SharedBpfCode {
 public:
  SharedBpfCode() = default;
  SharedBpfCode(BpfCode code)  // NOLINT(google-explicit-constructor): assigned as a BpfCode
      : held_(code.empty() ? nullptr : std::make_shared<const Held>(std::move(code))) {}
  operator const BpfCode&() const { return get(); }  // NOLINT(google-explicit-constructor)
  const BpfCode& get() const {
    static const BpfCode kNone;
    return held_ ? held_->code : kNone;
  }
  bool empty() const { return !held_; }
  std::size_t size() const { return get().size(); }
  BpfCode::const_iterator begin() const { return get().begin(); }
  BpfCode::const_iterator end() const { return get().end(); }
  void clear() { held_.reset(); }

  // program_allows() on these instructions, each answer remembered with them: every look
  // at a container judges its programs again (a wrapper of ours stays attached across
  // re-applies), and a repair's plan judges what its look just did. Like the descriptions
  // holding it, for one thread (the event loop's).
  Verdict allows(const DeviceNumber& dev, std::uint8_t access) const;

 private:
  friend class BpfCodeInterner;
  struct Judged {
    DeviceNumber dev;
    std::uint8_t access;
    Verdict verdict;
  };
  // Past that, answers are not kept (a description then holds about 1.3 KiB of them; a
  // container's look asks a few per program: each wanted device, each access it wants).
  static constexpr std::size_t kMaxJudged = 64;
  struct Held {
    explicit Held(BpfCode c) : code(std::move(c)) {}
    BpfCode code;
    mutable std::vector<Judged> judged;
  };
  explicit SharedBpfCode(std::shared_ptr<const Held> held) : held_(std::move(held)) {}
  std::shared_ptr<const Held> held_;
};

// Descriptions of programs with the same instructions share one buffer, and with it the
// verdicts remembered: a runtime applies the same spec to every container, and each
// re-apply brings a new program (a new id) with the instructions of the last one, whose
// answers are then known. Instructions are compared whole, never assumed equal by hash.
// Holds no buffer itself: an entry goes with the last description using it. At most `max`
// distinct entries; past that, instructions are not shared.
class BpfCodeInterner {
 public:
  explicit BpfCodeInterner(std::size_t max) : max_(max) {}
  SharedBpfCode intern(SharedBpfCode code);
  std::size_t size() const { return held_.size(); }

 private:
  std::size_t max_;
  std::unordered_multimap<std::size_t, std::weak_ptr<const SharedBpfCode::Held>> held_;  // hash of the bytes
};

// One instruction from its fields (registers 0..10): how the wrapper's code is written here,
// and how tests write programs of their own.
bpf_insn insn(std::uint8_t code, std::uint8_t dst, std::uint8_t src, std::int16_t off, std::int32_t imm);

// "gdw\x01": the first instruction of every wrapper of ours (r0 = kWrapperMagic).
inline constexpr std::int32_t kWrapperMagic = 0x67647701;
// The most devices one wrapper allows: far above any container's allocation.
inline constexpr std::size_t kMaxWrappedDevices = 1024;

// What the kernel's run of `code` returns for one access (`access`: kAccess* bits as one
// request, e.g. read|write for an O_RDWR open). kUnknown when the run reaches an
// instruction outside the executed subset, or runs more than 1 << 16 steps.
Verdict run_device_program(const BpfCode& code, const DeviceNumber& dev, std::uint8_t access);

// Does `code` allow every request the kernel can make within `access` (each non-empty
// subset: read, write, read+write, mknod...)? kDeny if any is denied, else kUnknown if any
// is unknown.
Verdict program_allows(const BpfCode& code, const DeviceNumber& dev, std::uint8_t access);

// Why `code` cannot be loaded again as it is (a call, a map or BTF reference); nullopt
// when it can.
std::optional<std::string> not_reloadable(const BpfCode& code);

// Our wrapper: allows each wanted device for exactly its access (a request within it),
// then runs `inner` unchanged for everything else.
BpfCode wrap_device_program(const std::vector<WantedDevice>& wanted, const BpfCode& inner);

struct UnwrappedProgram {
  std::vector<WantedDevice> added;  // name and reason are empty
  BpfCode inner;
};
// The wanted devices and the wrapped code of one of our wrappers; nullopt for any other code.
std::optional<UnwrappedProgram> unwrap_device_program(const BpfCode& code);

// An ordered rule list (runc's semantics: the last matching rule decides, no match denies)
// as a program. For the union programs earlier versions of the daemon attached (their rules
// live in a map): compiled, they can be run and wrapped like any other program.
BpfCode compile_device_rules(const std::vector<OciDeviceCgroupRule>& rules);

}  // namespace gdw
