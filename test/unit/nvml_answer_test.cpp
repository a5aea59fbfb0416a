#include <gtest/gtest.h>

#include <string>

#include "nvidia/nvml.h"

namespace gdw {
namespace {

NvmlAnswer h20_answer() {
  NvmlAnswer answer;
  answer.driver_version = "570.86.15";
  answer.gpus = {{"GPU-aaa", 0, {}, {}, false}, {"GPU-bbb", 1, {}, {}, false}};
  answer.migs = {{"MIG-one", 0, 2, 0}, {"MIG-two", 0, 3, 0}, {"MIG-three", 1, 9, 1}};
  return answer;
}

TEST(NvmlAnswer, RoundTrips) {
  auto text = format_nvml_answer(h20_answer());
  auto parsed = parse_nvml_answer(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->driver_version, "570.86.15");
  ASSERT_EQ(parsed->gpus.size(), 2u);
  EXPECT_EQ(parsed->gpus[1].uuid, "GPU-bbb");
  EXPECT_EQ(parsed->gpus[1].minor, 1u);
  EXPECT_EQ(parsed->migs, h20_answer().migs);
}

TEST(NvmlAnswer, FormatsInvalidUtf8WithoutThrowing) {
  NvmlAnswer answer;
  answer.driver_version = "\xff\xfe";
  auto parsed = parse_nvml_answer(format_nvml_answer(answer));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_FALSE(parsed->driver_version.empty());
}

TEST(NvmlAnswer, RejectsMalformedAnswersWithTheReason) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "not valid JSON"},
      {"{\"driver_version\": \"1\", \"gpus\": [", "not valid JSON"},
      {"[]", "must be a JSON object"},
      {R"({"gpus": [], "migs": []})", "missing \"driver_version\""},
      {R"({"driver_version": 5, "gpus": [], "migs": []})", "\"driver_version\" must be a string"},
      {R"({"driver_version": "1", "migs": []})", "missing \"gpus\""},
      {R"({"driver_version": "1", "gpus": {}, "migs": []})", "\"gpus\" must be an array"},
      {R"({"driver_version": "1", "gpus": [7], "migs": []})", "gpus[0]: must be an object"},
      {R"({"driver_version": "1", "gpus": [{"uuid": "GPU-a"}], "migs": []})", "gpus[0]: missing \"minor\""},
      {R"({"driver_version": "1", "gpus": [{"uuid": "GPU-a", "minor": -1}], "migs": []})",
       "gpus[0]: \"minor\" must be an unsigned 32-bit number"},
      {R"({"driver_version": "1", "gpus": [{"uuid": "GPU-a", "minor": 4294967296}], "migs": []})",
       "gpus[0]: \"minor\" must be an unsigned 32-bit number"},
      {R"({"driver_version": "1", "gpus": [{"uuid": "GPU-a", "minor": 1.5}], "migs": []})", "\"minor\" must be"},
      {R"({"driver_version": "1", "gpus": []})", "missing \"migs\""},
      {R"({"driver_version": "1", "gpus": [], "migs": [{"uuid": "MIG-a", "gpu_minor": 0, "gpu_instance": 1}]})",
       "migs[0]: missing \"compute_instance\""},
      {R"({"driver_version": "1", "gpus": [], "migs": [{"uuid": 1, "gpu_minor": 0}]})",
       "migs[0]: \"uuid\" must be a string"},
  };
  for (const auto& [text, why] : cases) {
    auto r = parse_nvml_answer(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.error().message.find(why), std::string::npos) << text << " → " << r.error().message;
  }
}

TEST(NvmlAnswer, SurvivesDeepNesting) {
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_FALSE(parse_nvml_answer(deep).ok());
}

TEST(MergeNvmlAnswer, NvmlWinsForUuidsItKnows) {
  Inventory inventory;
  inventory.gpus = {{"GPU-aaa", 0, "0000:0f:00.0", "NVIDIA H20", false}};
  inventory.migs = {{"MIG-one", 0, 7, 7}, {"MIG-config-only", 0, 5, 0}};
  inventory.mig_source = "config";

  merge_nvml_answer(inventory, h20_answer());

  EXPECT_EQ(inventory.mig_source, "nvml");
  ASSERT_NE(inventory.mig_by_uuid("MIG-one"), nullptr);
  EXPECT_EQ(*inventory.mig_by_uuid("MIG-one"), (MigDevice{"MIG-one", 0, 2, 0}));
  EXPECT_NE(inventory.mig_by_uuid("MIG-config-only"), nullptr);
  EXPECT_NE(inventory.mig_by_uuid("MIG-three"), nullptr);
  EXPECT_EQ(inventory.migs.size(), 4u);
  // procfs data for a known GPU stays; a GPU only NVML reported is added.
  ASSERT_EQ(inventory.gpus.size(), 2u);
  EXPECT_EQ(inventory.gpu_by_uuid("GPU-aaa")->model, "NVIDIA H20");
  EXPECT_EQ(inventory.gpu_by_uuid("GPU-bbb")->minor, 1u);
}

TEST(MergeNvmlAnswer, AnswerWithoutMigsKeepsTheConfiguredSource) {
  Inventory inventory;
  inventory.migs = {{"MIG-config-only", 0, 5, 0}};
  inventory.mig_source = "config";
  NvmlAnswer answer;
  answer.gpus = {{"GPU-aaa", 0, {}, {}, false}};
  merge_nvml_answer(inventory, answer);
  EXPECT_EQ(inventory.mig_source, "config");
  EXPECT_EQ(inventory.migs.size(), 1u);
}

}  // namespace
}  // namespace gdw
