// The pure half of cgroup v2 device programs: an exact interpreter for the instruction
// subset device programs use, and the wrapper's code generator. No syscalls here.
#include "backend/device_program_code.h"

#include <array>
#include <cstring>
#include <string_view>

namespace gdw {

bpf_insn insn(std::uint8_t code, std::uint8_t dst, std::uint8_t src, std::int16_t off, std::int32_t imm) {
  bpf_insn i{};
  i.code = code;
  i.dst_reg = dst & 0xf;
  i.src_reg = src & 0xf;
  i.off = off;
  i.imm = imm;
  return i;
}

namespace {

constexpr int kMaxSteps = 1 << 16;
constexpr std::uint32_t kCtxSize = 12;  // struct bpf_cgroup_dev_ctx: access_type, major, minor

bool same(const bpf_insn& a, const bpf_insn& b) {
  return a.code == b.code && a.dst_reg == b.dst_reg && a.src_reg == b.src_reg && a.off == b.off && a.imm == b.imm;
}

// ---- interpreter -----------------------------------------------------------------------

enum class Kind : std::uint8_t { kUninit, kScalar, kCtx };
struct Reg {
  Kind kind = Kind::kUninit;
  std::uint64_t value = 0;  // the scalar, or the offset into the context
};

struct Machine {
  std::array<Reg, 11> r{};
  std::array<std::uint8_t, kCtxSize> ctx{};
};

// One ALU operation on 64 (or 32, `wide` false) bits; false when not executed exactly.
bool alu(std::uint8_t op, std::uint64_t& dst, std::uint64_t src, bool wide) {
  const std::uint64_t mask = wide ? ~0ULL : 0xffffffffULL;
  const unsigned width = wide ? 64 : 32;
  std::uint64_t d = dst & mask, s = src & mask;
  switch (op) {
    case BPF_ADD: d += s; break;
    case BPF_SUB: d -= s; break;
    case BPF_MUL: d *= s; break;
    case BPF_DIV: d = s == 0 ? 0 : d / s; break;  // the kernel's division by zero yields 0
    case BPF_MOD: d = s == 0 ? d : d % s; break;  // and modulo by zero leaves dst
    case BPF_OR: d |= s; break;
    case BPF_AND: d &= s; break;
    case BPF_XOR: d ^= s; break;
    case BPF_MOV: d = s; break;
    case BPF_NEG: d = 0 - d; break;
    case BPF_LSH:
      if (s >= width) return false;
      d <<= s;
      break;
    case BPF_RSH:
      if (s >= width) return false;
      d >>= s;
      break;
    case BPF_ARSH:
      if (s >= width) return false;
      d = wide ? static_cast<std::uint64_t>(static_cast<std::int64_t>(d) >> s)
               : static_cast<std::uint32_t>(static_cast<std::int32_t>(static_cast<std::uint32_t>(d)) >> s);
      break;
    default:
      return false;  // BPF_END (byte swaps) and anything newer
  }
  dst = d & mask;
  return true;
}

bool exec_alu(Machine& m, const bpf_insn& i) {
  const bool wide = BPF_CLASS(i.code) == BPF_ALU64;
  const std::uint8_t op = BPF_OP(i.code);
  if (i.off != 0) return false;  // signed division, sign-extending moves
  Reg& dst = m.r[i.dst_reg];
  if (BPF_SRC(i.code) == BPF_X) {
    const Reg& src = m.r[i.src_reg];
    if (op == BPF_MOV && wide && src.kind == Kind::kCtx) {
      dst = src;  // copying the context pointer
      return true;
    }
    if (src.kind != Kind::kScalar) return false;
    if (op != BPF_MOV && dst.kind != Kind::kScalar) return false;
    dst.kind = Kind::kScalar;
    return alu(op, dst.value, src.value, wide);
  }
  if (op != BPF_MOV && dst.kind != Kind::kScalar) return false;
  dst.kind = Kind::kScalar;
  // The immediate is sign-extended to 64 bits for ALU64.
  const auto imm = static_cast<std::uint64_t>(static_cast<std::int64_t>(i.imm));
  return alu(op, dst.value, imm, wide);
}

bool exec_load(Machine& m, const bpf_insn& i) {
  if (BPF_MODE(i.code) != BPF_MEM) return false;
  const Reg& base = m.r[i.src_reg];
  if (base.kind != Kind::kCtx) return false;  // stack and map memory: not executed
  static constexpr std::array<std::uint32_t, 4> kSizes{4, 2, 1, 8};  // BPF_W, BPF_H, BPF_B, BPF_DW
  const std::uint32_t size = kSizes[BPF_SIZE(i.code) >> 3];
  const std::int64_t at = static_cast<std::int64_t>(base.value) + i.off;
  if (at < 0 || at + size > kCtxSize) return false;
  std::uint64_t v = 0;
  std::memcpy(&v, m.ctx.data() + at, size);  // little-endian hosts, as the kernel's context
  m.r[i.dst_reg] = {Kind::kScalar, v};
  return true;
}

// The outcome of a conditional jump, or nullopt when its operands are not scalars.
std::optional<bool> condition(const Machine& m, const bpf_insn& i) {
  const bool wide = BPF_CLASS(i.code) == BPF_JMP;
  const Reg& dst = m.r[i.dst_reg];
  if (dst.kind != Kind::kScalar) return std::nullopt;
  std::uint64_t a = dst.value, b;
  if (BPF_SRC(i.code) == BPF_X) {
    if (m.r[i.src_reg].kind != Kind::kScalar) return std::nullopt;
    b = m.r[i.src_reg].value;
  } else {
    b = static_cast<std::uint64_t>(static_cast<std::int64_t>(i.imm));
  }
  if (!wide) {
    a &= 0xffffffffULL;
    b &= 0xffffffffULL;
  }
  const std::int64_t sa = wide ? static_cast<std::int64_t>(a) : static_cast<std::int32_t>(a);
  const std::int64_t sb = wide ? static_cast<std::int64_t>(b) : static_cast<std::int32_t>(b);
  switch (BPF_OP(i.code)) {
    case BPF_JEQ: return a == b;
    case BPF_JNE: return a != b;
    case BPF_JGT: return a > b;
    case BPF_JGE: return a >= b;
    case BPF_JLT: return a < b;
    case BPF_JLE: return a <= b;
    case BPF_JSET: return (a & b) != 0;
    case BPF_JSGT: return sa > sb;
    case BPF_JSGE: return sa >= sb;
    case BPF_JSLT: return sa < sb;
    case BPF_JSLE: return sa <= sb;
    default: return std::nullopt;
  }
}

Machine start(const DeviceNumber& dev, std::uint8_t access) {
  Machine m;
  const std::uint32_t type = dev.type == DeviceType::kBlock ? BPF_DEVCG_DEV_BLOCK : BPF_DEVCG_DEV_CHAR;
  const std::array<std::uint32_t, 3> fields{(static_cast<std::uint32_t>(access) << 16) | type, dev.major, dev.minor};
  std::memcpy(m.ctx.data(), fields.data(), kCtxSize);
  m.r[BPF_REG_1] = {Kind::kCtx, 0};
  return m;
}

// ---- code generation ---------------------------------------------------------------------

// Registers the generated code keeps the context's fields in.
constexpr std::uint8_t kRegAccess = BPF_REG_2, kRegMajor = BPF_REG_3, kRegMinor = BPF_REG_4, kRegType = BPF_REG_5;

void emit_context_loads(BpfCode& code) {
  code.push_back(insn(BPF_LDX | BPF_MEM | BPF_W, kRegType, BPF_REG_1, 0, 0));  // access_type
  code.push_back(insn(BPF_ALU64 | BPF_MOV | BPF_X, kRegAccess, kRegType, 0, 0));
  code.push_back(insn(BPF_ALU64 | BPF_AND | BPF_K, kRegType, 0, 0, 0xffff));
  code.push_back(insn(BPF_ALU64 | BPF_RSH | BPF_K, kRegAccess, 0, 0, 16));
  code.push_back(insn(BPF_LDX | BPF_MEM | BPF_W, kRegMajor, BPF_REG_1, 4, 0));
  code.push_back(insn(BPF_LDX | BPF_MEM | BPF_W, kRegMinor, BPF_REG_1, 8, 0));
}
constexpr std::size_t kContextLoads = 6;

std::int32_t kernel_type(DeviceType t) { return t == DeviceType::kBlock ? BPF_DEVCG_DEV_BLOCK : BPF_DEVCG_DEV_CHAR; }

// "If the request matches, exit with `verdict`"; a check is left out where the rule has a
// wildcard. The request matches when every access bit it asks for is in `access`.
void emit_match(BpfCode& code, const DeviceRule& rule, bool verdict) {
  std::vector<std::size_t> skips;
  auto skip_unless = [&](std::uint8_t reg, std::int32_t value) {
    skips.push_back(code.size());
    code.push_back(insn(BPF_JMP32 | BPF_JNE | BPF_K, reg, 0, 0, value));
  };
  if (rule.type != DeviceType::kAll) skip_unless(kRegType, kernel_type(rule.type));
  if (rule.major != kAnyNumber) skip_unless(kRegMajor, static_cast<std::int32_t>(rule.major));
  if (rule.minor != kAnyNumber) skip_unless(kRegMinor, static_cast<std::int32_t>(rule.minor));
  code.push_back(insn(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_0, kRegAccess, 0, 0));
  code.push_back(insn(BPF_ALU64 | BPF_AND | BPF_K, BPF_REG_0, 0, 0, ~rule.access & kAccessAll));
  skip_unless(BPF_REG_0, 0);
  code.push_back(insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, verdict ? 1 : 0));
  code.push_back(insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  for (std::size_t at : skips) code[at].off = static_cast<std::int16_t>(code.size() - at - 1);
}
constexpr std::size_t kWrapperBlock = 8;  // emit_match with all three checks

BpfCode wrapper_prologue(const std::vector<WantedDevice>& wanted) {
  BpfCode code;
  code.push_back(insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, kWrapperMagic));
  code.push_back(insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, static_cast<std::int32_t>(wanted.size())));
  emit_context_loads(code);
  for (const auto& w : wanted)
    emit_match(code, DeviceRule{w.dev.type == DeviceType::kBlock ? DeviceType::kBlock : DeviceType::kChar,
                                w.dev.major, w.dev.minor, static_cast<std::uint8_t>(w.access & kAccessAll)},
               true);
  return code;
}

}  // namespace

std::string to_string(Verdict v) {
  switch (v) {
    case Verdict::kAllow: return "allow";
    case Verdict::kDeny: return "deny";
    case Verdict::kUnknown: return "unknown";
  }
  return "unknown";
}

Verdict run_device_program(const BpfCode& code, const DeviceNumber& dev, std::uint8_t access) {
  Machine m = start(dev, access);
  std::size_t pc = 0;
  for (int step = 0; step < kMaxSteps && pc < code.size(); ++step) {
    const bpf_insn& i = code[pc];
    const std::uint8_t cls = BPF_CLASS(i.code);
    if (cls == BPF_ALU || cls == BPF_ALU64) {
      if (!exec_alu(m, i)) return Verdict::kUnknown;
    } else if (cls == BPF_LDX) {
      if (!exec_load(m, i)) return Verdict::kUnknown;
    } else if (i.code == (BPF_LD | BPF_IMM | BPF_DW)) {
      if (i.src_reg != 0 || pc + 1 >= code.size()) return Verdict::kUnknown;  // a map or BTF reference
      const std::uint64_t lo = static_cast<std::uint32_t>(i.imm), hi = static_cast<std::uint32_t>(code[pc + 1].imm);
      m.r[i.dst_reg] = {Kind::kScalar, lo | (hi << 32)};
      ++pc;
    } else if (cls == BPF_JMP || cls == BPF_JMP32) {
      const std::uint8_t op = BPF_OP(i.code);
      if (op == BPF_EXIT) {
        if (m.r[BPF_REG_0].kind != Kind::kScalar) return Verdict::kUnknown;
        // The kernel reads the verdict as u32: non-zero allows.
        return static_cast<std::uint32_t>(m.r[BPF_REG_0].value) != 0 ? Verdict::kAllow : Verdict::kDeny;
      }
      if (op == BPF_CALL) return Verdict::kUnknown;
      if (op == BPF_JA) {
        // JMP32|JA ("gotol") carries its offset in imm.
        pc += 1 + (cls == BPF_JMP ? i.off : i.imm);
        continue;
      }
      auto taken = condition(m, i);
      if (!taken) return Verdict::kUnknown;
      pc += 1 + (*taken ? i.off : 0);
      continue;
    } else {
      return Verdict::kUnknown;  // stores, atomics, packet loads
    }
    ++pc;
  }
  return Verdict::kUnknown;
}

Verdict program_allows(const BpfCode& code, const DeviceNumber& dev, std::uint8_t access) {
  Verdict result = Verdict::kAllow;
  access &= kAccessAll;
  for (std::uint8_t request = 1; request <= kAccessAll; ++request) {
    if ((request & ~access) != 0) continue;
    Verdict v = run_device_program(code, dev, request);
    if (v == Verdict::kDeny) return Verdict::kDeny;
    if (v == Verdict::kUnknown) result = Verdict::kUnknown;
  }
  return result;
}

Verdict SharedBpfCode::allows(const DeviceNumber& dev, std::uint8_t access) const {
  if (!held_) return program_allows(get(), dev, access);
  for (const Judged& j : held_->judged)
    if (j.access == access && j.dev == dev) return j.verdict;
  const Verdict v = program_allows(held_->code, dev, access);
  if (held_->judged.size() < kMaxJudged) held_->judged.push_back({dev, access, v});
  return v;
}

SharedBpfCode BpfCodeInterner::intern(SharedBpfCode code) {
  if (code.empty()) return code;
  const BpfCode& mine = code.get();
  const std::size_t hash = std::hash<std::string_view>{}(
      std::string_view(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(bpf_insn)));
  auto [first, last] = held_.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    auto held = it->second.lock();
    if (held && held->code.size() == mine.size() &&
        std::memcmp(held->code.data(), mine.data(), mine.size() * sizeof(bpf_insn)) == 0)
      return SharedBpfCode(std::move(held));
  }
  if (held_.size() >= max_) std::erase_if(held_, [](const auto& kv) { return kv.second.expired(); });
  if (held_.size() < max_) held_.emplace(hash, code.held_);
  return code;
}

std::optional<std::string> not_reloadable(const BpfCode& code) {
  for (std::size_t pc = 0; pc < code.size(); ++pc) {
    const bpf_insn& i = code[pc];
    const std::uint8_t cls = BPF_CLASS(i.code);
    if ((cls == BPF_JMP || cls == BPF_JMP32) && BPF_OP(i.code) == BPF_CALL)
      return "it calls helpers or subprograms (instruction " + std::to_string(pc) + ")";
    if (i.code == (BPF_LD | BPF_IMM | BPF_DW)) {
      if (i.src_reg != 0) return "it refers to a map or kernel object (instruction " + std::to_string(pc) + ")";
      ++pc;
    }
  }
  if (code.empty()) return std::string("its instructions could not be read");
  return std::nullopt;
}

BpfCode wrap_device_program(const std::vector<WantedDevice>& wanted, const BpfCode& inner) {
  BpfCode code = wrapper_prologue(wanted);
  code.insert(code.end(), inner.begin(), inner.end());
  return code;
}

std::optional<UnwrappedProgram> unwrap_device_program(const BpfCode& code) {
  const std::size_t header = 2 + kContextLoads;
  if (code.size() < header || !same(code[0], insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, kWrapperMagic)))
    return std::nullopt;
  const bpf_insn& count_insn = code[1];
  if (count_insn.code != (BPF_ALU64 | BPF_MOV | BPF_K) || count_insn.dst_reg != BPF_REG_0 || count_insn.imm < 0 ||
      static_cast<std::size_t>(count_insn.imm) > kMaxWrappedDevices)
    return std::nullopt;
  const auto count = static_cast<std::size_t>(count_insn.imm);
  if (code.size() < header + count * kWrapperBlock) return std::nullopt;
  UnwrappedProgram out;
  for (std::size_t k = 0; k < count; ++k) {
    const bpf_insn* block = &code[header + k * kWrapperBlock];
    WantedDevice w;
    w.dev.type = block[0].imm == BPF_DEVCG_DEV_BLOCK ? DeviceType::kBlock : DeviceType::kChar;
    w.dev.major = static_cast<std::uint32_t>(block[1].imm);
    w.dev.minor = static_cast<std::uint32_t>(block[2].imm);
    w.access = static_cast<std::uint8_t>(~block[4].imm & kAccessAll);
    out.added.push_back(w);
  }
  // The whole prologue must be exactly what we generate for that set: a lookalike is not ours.
  const BpfCode expected = wrapper_prologue(out.added);
  for (std::size_t pc = 0; pc < expected.size(); ++pc)
    if (!same(code[pc], expected[pc])) return std::nullopt;
  out.inner.assign(code.begin() + static_cast<std::ptrdiff_t>(expected.size()), code.end());
  return out;
}

BpfCode compile_device_rules(const std::vector<OciDeviceCgroupRule>& rules) {
  BpfCode code;
  emit_context_loads(code);
  // The last matching rule decides: test them from the last, the first match exits.
  for (auto it = rules.rbegin(); it != rules.rend(); ++it) emit_match(code, it->rule, it->allow);
  code.push_back(insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0));
  code.push_back(insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  return code;
}

}  // namespace gdw
