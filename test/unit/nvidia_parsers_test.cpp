#include <gtest/gtest.h>

#include <map>
#include <string>

#include "nvidia/inventory.h"

namespace gdw {
namespace {

using Majors = std::map<std::string, std::uint32_t>;

struct ProcDevicesCase {
  const char* name;
  std::string text;
  bool ok;
  Majors majors;           // when ok
  const char* error_part;  // when !ok: a piece of the message
};

// /proc/devices as the kernel prints it ("%3d %s\n"), with what drivers register.
const std::string kNewDriver =
    "Character devices:\n"
    "  1 mem\n"
    "  4 /dev/vc/0\n"
    " 10 misc\n"
    "195 nvidia\n"
    "195 nvidiactl\n"
    "236 nvidia-nvswitch\n"
    "238 nvidia-caps\n"
    "239 nvidia-uvm\n"
    "240 nvidia-caps-imex-channels\n"
    "\n"
    "Block devices:\n"
    "  7 loop\n"
    "259 blkext\n";

TEST(ParseProcDevices, ReadsTheCharacterSectionOnly) {
  const ProcDevicesCase cases[] = {
      {"new driver (>= 550.40)",
       kNewDriver,
       true,
       {{"mem", 1},
        {"/dev/vc/0", 4},
        {"misc", 10},
        {"nvidia", 195},
        {"nvidiactl", 195},
        {"nvidia-nvswitch", 236},
        {"nvidia-caps", 238},
        {"nvidia-uvm", 239},
        {"nvidia-caps-imex-channels", 240}},
       nullptr},
      {"old driver: nvidia-frontend",
       "Character devices:\n  1 mem\n195 nvidia-frontend\n241 nvidia-uvm\n\nBlock devices:\n  8 sd\n",
       true,
       {{"mem", 1}, {"nvidia-frontend", 195}, {"nvidia-uvm", 241}},
       nullptr},
      {"block names never leak in", "Character devices:\n  1 mem\n\nBlock devices:\n195 nvidia\n", true, {{"mem", 1}},
       nullptr},
      {"header right after the section, no blank line",
       "Character devices:\n  1 mem\nBlock devices:\n  7 loop\n",
       true,
       {{"mem", 1}},
       nullptr},
      {"no final newline", "Character devices:\n195 nvidia", true, {{"nvidia", 195}}, nullptr},
      {"tabs and CRLF", "Character devices:\r\n\t195\tnvidia\r\n", true, {{"nvidia", 195}}, nullptr},
      {"empty section", "Character devices:\n\nBlock devices:\n  7 loop\n", true, {}, nullptr},
      {"a name twice keeps the first major", "Character devices:\n195 nvidia\n500 nvidia\n", true, {{"nvidia", 195}},
       nullptr},
      {"empty text", "", false, {}, "no 'Character devices:' section"},
      {"block section only", "Block devices:\n  7 loop\n", false, {}, "no 'Character devices:' section"},
      {"major is not a number", "Character devices:\n  1 mem\nabc nvidia\n", false, {},
       "line 3: expected '<major> <name>'"},
      {"negative major", "Character devices:\n-1 nvidia\n", false, {}, "line 2"},
      {"major overflows 32 bits", "Character devices:\n4294967296 nvidia\n", false, {}, "line 2"},
      {"name missing", "Character devices:\n  1 mem\n195\n", false, {}, "line 3: no driver name"},
      {"control bytes are escaped in the message", std::string("Character devices:\nx\x01y\n"), false, {},
       "'x\\x01y'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = parse_proc_devices(c.text);
    ASSERT_EQ(r.ok(), c.ok) << (r.ok() ? "" : r.error().message);
    if (c.ok) {
      EXPECT_EQ(*r, c.majors);
    } else {
      EXPECT_NE(r.error().message.find(c.error_part), std::string::npos) << r.error().message;
    }
  }
}

const std::string kH20Information =
    "Model: \t\t NVIDIA H20\n"
    "IRQ:             134\n"
    "GPU UUID:        GPU-2f815c32-768d-d782-1073-db01d7b90215\n"
    "Video BIOS:      96.00.af.00.01\n"
    "Bus Type:        PCIe\n"
    "DMA Size:        52 bits\n"
    "DMA Mask:        0xfffffffffffff\n"
    "Bus Location:    0000:0f:00.0\n"
    "Device Minor:    3\n"
    "GPU Excluded:    No\n";

struct InformationCase {
  const char* name;
  std::string text;
  bool ok;
  GpuDevice gpu;
  const char* error_part;
};

TEST(ParseGpuInformation, TakesKeysUpToTheFirstColon) {
  const InformationCase cases[] = {
      {"H20", kH20Information, true,
       {"GPU-2f815c32-768d-d782-1073-db01d7b90215", 3, "0000:0f:00.0", "NVIDIA H20", false}, nullptr},
      {"only the required keys, excluded GPU",
       "GPU UUID: GPU-abc\nDevice Minor: 247\nGPU Excluded: Yes\n", true, {"GPU-abc", 247, "", "", true}, nullptr},
      {"old driver without GPU Excluded, blank lines",
       "\nModel:  Tesla T4\nGPU UUID:  GPU-t4\n\nDevice Minor:  0\n", true, {"GPU-t4", 0, "", "Tesla T4", false},
       nullptr},
      {"unknown keys and values with colons are ignored", "Note: a: b\nGPU UUID: GPU-x\nDevice Minor: 1", true,
       {"GPU-x", 1, "", "", false}, nullptr},
      {"no UUID", "Device Minor: 0\n", false, {}, "no 'GPU UUID' line"},
      {"no minor", "GPU UUID: GPU-x\n", false, {}, "no 'Device Minor' line"},
      {"empty", "", false, {}, "no 'GPU UUID' line"},
      {"line without a colon", "GPU UUID: GPU-x\ngarbage\nDevice Minor: 0\n", false, {},
       "line 2: expected 'Key: value', got 'garbage'"},
      {"minor not a number", "GPU UUID: GPU-x\nDevice Minor: zero\n", false, {}, "line 2: Device Minor 'zero'"},
      {"minor negative", "GPU UUID: GPU-x\nDevice Minor: -1\n", false, {}, "line 2"},
      {"minor with trailing text", "GPU UUID: GPU-x\nDevice Minor: 1 2\n", false, {}, "line 2"},
      {"minor empty", "GPU UUID: GPU-x\nDevice Minor:\n", false, {}, "line 2"},
      {"UUID without GPU- prefix", "GPU UUID: 2f815c32\nDevice Minor: 0\n", false, {}, "line 1: GPU UUID '2f815c32'"},
      {"UUID just the prefix", "GPU UUID: GPU-\nDevice Minor: 0\n", false, {}, "line 1"},
      {"UUID twice", "GPU UUID: GPU-a\nGPU UUID: GPU-b\nDevice Minor: 0\n", false, {}, "line 2: GPU UUID given twice"},
      {"minor twice", "GPU UUID: GPU-a\nDevice Minor: 0\nDevice Minor: 1\n", false, {},
       "line 3: Device Minor given twice"},
      {"excluded neither Yes nor No", "GPU UUID: GPU-a\nDevice Minor: 0\nGPU Excluded: maybe\n", false, {},
       "line 3: GPU Excluded must be Yes or No"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = parse_gpu_information(c.text);
    ASSERT_EQ(r.ok(), c.ok) << (r.ok() ? "" : r.error().message);
    if (c.ok) {
      EXPECT_EQ(r->uuid, c.gpu.uuid);
      EXPECT_EQ(r->minor, c.gpu.minor);
      EXPECT_EQ(r->bus_location, c.gpu.bus_location);
      EXPECT_EQ(r->model, c.gpu.model);
      EXPECT_EQ(r->excluded, c.gpu.excluded);
    } else {
      EXPECT_NE(r.error().message.find(c.error_part), std::string::npos) << r.error().message;
    }
  }
}

struct MigMinorsCase {
  const char* name;
  std::string text;
  bool ok;
  Majors minors;
  const char* error_part;
};

TEST(ParseMigMinors, MapsCapabilityPathsToMinors) {
  const MigMinorsCase cases[] = {
      {"driver layout",
       "config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n",
       true,
       {{"config", 1},
        {"monitor", 2},
        {"gpu0/gi0/access", 3},
        {"gpu0/gi0/ci0/access", 4},
        {"gpu0/gi1/access", 12},
        {"gpu0/gi1/ci0/access", 13}},
       nullptr},
      {"empty file", "", true, {}, nullptr},
      {"blank lines, padding, no final newline", "\n  config 1  \n\ngpu1/gi2/access\t150", true,
       {{"config", 1}, {"gpu1/gi2/access", 150}}, nullptr},
      {"same line twice is harmless", "config 1\nconfig 1\n", true, {{"config", 1}}, nullptr},
      {"same path, different minors", "config 1\nconfig 2\n", false, {}, "line 2: 'config' listed twice"},
      {"no minor", "config 1\nmonitor\n", false, {}, "line 2: expected '<path> <minor>', got 'monitor'"},
      {"minor not a number", "gpu0/gi1/access x12\n", false, {}, "line 1"},
      {"extra field", "gpu0/gi1/access 12 13\n", false, {}, "line 1"},
      {"minor overflows", "config 99999999999\n", false, {}, "line 1"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = parse_mig_minors(c.text);
    ASSERT_EQ(r.ok(), c.ok) << (r.ok() ? "" : r.error().message);
    if (c.ok) {
      EXPECT_EQ(*r, c.minors);
    } else {
      EXPECT_NE(r.error().message.find(c.error_part), std::string::npos) << r.error().message;
    }
  }
}

TEST(ParseProcDevices, QuotesLongLinesBounded) {
  std::string long_line(10000, 'x');
  auto r = parse_proc_devices("Character devices:\n" + long_line + "\n");
  ASSERT_FALSE(r.ok());
  EXPECT_LT(r.error().message.size(), 200u) << r.error().message;
  EXPECT_NE(r.error().message.find("...'"), std::string::npos);
}

}  // namespace
}  // namespace gdw
