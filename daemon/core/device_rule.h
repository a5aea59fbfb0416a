// cgroup v1 device rules with the kernel's exact semantics (security/device_cgroup.c).
//
// A v1 devices cgroup has a default behaviour (allow or deny) and a list of exceptions.
// devices.list shows `a *:* rwm` when the behaviour is allow (its deny exceptions are not
// shown), otherwise the allow exceptions. An access is allowed in a default-deny cgroup
// only when ONE exception covers the whole requested access: `c 1:3 r` and `c 1:3 w` as
// two exceptions would not allow an O_RDWR open, although the kernel merges writes for the
// same type:major:minor into one exception, so devices.list never shows that split.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace gdw {

enum class DeviceType : char { kAll = 'a', kChar = 'c', kBlock = 'b' };

// Access bits as the kernel numbers them (DEVCG_ACC_MKNOD/READ/WRITE); the v2 device
// program context uses the same values.
enum AccessBits : std::uint8_t {
  kAccessMknod = 1,
  kAccessRead = 2,
  kAccessWrite = 4,
  kAccessReadWrite = kAccessRead | kAccessWrite,
  kAccessAll = kAccessMknod | kAccessRead | kAccessWrite,
};

// `*` in a rule's major or minor.
inline constexpr std::uint32_t kAnyNumber = UINT32_MAX;

struct DeviceRule {
  DeviceType type = DeviceType::kAll;
  std::uint32_t major = kAnyNumber;
  std::uint32_t minor = kAnyNumber;
  std::uint8_t access = kAccessAll;

  bool operator==(const DeviceRule&) const = default;
};

// A concrete device a process may open: type is kChar or kBlock, numbers are not wildcards.
struct DeviceNumber {
  DeviceType type = DeviceType::kChar;
  std::uint32_t major = 0;
  std::uint32_t minor = 0;

  bool operator==(const DeviceNumber&) const = default;
  auto operator<=>(const DeviceNumber&) const = default;
};

// Parses one rule as written to devices.allow/devices.deny or shown in devices.list:
// "c 195:0 rw", "b *:* m", "a" (anything after `a` is ignored, as by the kernel).
Result<DeviceRule> parse_device_rule(std::string_view text);

// Formats as devices.list shows a rule: "c 195:0 rw", "a *:* rwm".
std::string format_device_rule(const DeviceRule& rule);
std::string format_access(std::uint8_t access);
Result<std::uint8_t> parse_access(std::string_view text);
std::string format_device_number(const DeviceNumber& dev);  // "195:0"

// What devices.list says.
struct DeviceList {
  bool allow_all = false;              // `a *:* rwm`: default-allow behaviour
  std::vector<DeviceRule> exceptions;  // allow exceptions of a default-deny cgroup
};

Result<DeviceList> parse_devices_list(std::string_view text);

// Does the cgroup let a process access `dev` with `access` (kernel's match_exception)?
bool device_list_allows(const DeviceList& list, const DeviceNumber& dev, std::uint8_t access);

// Does `rule` (an allow exception) alone cover `dev` with `access`?
bool rule_covers(const DeviceRule& rule, const DeviceNumber& dev, std::uint8_t access);

}  // namespace gdw
