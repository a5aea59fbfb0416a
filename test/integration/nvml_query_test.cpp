// `gpu-devwatch nvml-query` with a fake libnvidia-ml (test/support/fake_nvml.c), and the
// daemon side (NvmlQuery, run_nvml_query) that runs it with a deadline.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "nvidia/nvml.h"
#include "support/process.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

using namespace std::chrono_literals;
using test::run_command;

const std::string kBinary = GDW_BINARY;
const std::string kFakeNvml = GDW_FAKE_NVML;
const std::string kDevices = "FAKE_NVML_DEVICES=GPU-aaa:0;GPU-bbb:1;MIG-one@0/1/0,MIG-two@0/2/0,MIG-three@1/3/1";

// run_nvml_query children inherit this process's environment.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::string old_;
  bool had_ = false;
};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

bool process_gone(pid_t pid) { return ::kill(pid, 0) == -1 && errno == ESRCH; }

// An executable shell script standing in for the gpu-devwatch binary.
std::string write_script(const test::TempDir& dir, const std::string& name, const std::string& body) {
  std::string path = dir.write(name, "#!/bin/sh\n" + body);
  ::chmod(path.c_str(), 0755);
  return path;
}

void expect_h20_answer(const NvmlAnswer& answer) {
  EXPECT_EQ(answer.driver_version, "550.54.15");
  ASSERT_EQ(answer.gpus.size(), 2u);
  EXPECT_EQ(answer.gpus[0].uuid, "GPU-aaa");
  EXPECT_EQ(answer.gpus[1].uuid, "GPU-bbb");
  EXPECT_EQ(answer.gpus[1].minor, 1u);
  std::vector<MigDevice> migs = {{"MIG-one", 0, 1, 0}, {"MIG-two", 0, 2, 0}, {"MIG-three", 1, 3, 1}};
  EXPECT_EQ(answer.migs, migs);
}

TEST(NvmlQueryCommand, PrintsGpusAndMigsAsJson) {
  auto r = run_command({kBinary, "nvml-query", "--library", kFakeNvml}, 10s, {"FAKE_NVML_MODE=ok", kDevices});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto answer = parse_nvml_answer(r.out);
  ASSERT_TRUE(answer.ok()) << answer.error().message << "\n" << r.out;
  expect_h20_answer(*answer);
}

TEST(NvmlQueryCommand, NoMigSupportMeansNoMigs) {
  auto r = run_command({kBinary, "nvml-query", "--library", kFakeNvml}, 10s,
                       {"FAKE_NVML_MODE=ok", kDevices, "FAKE_NVML_MIG=unsupported"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto answer = parse_nvml_answer(r.out);
  ASSERT_TRUE(answer.ok()) << answer.error().message;
  EXPECT_EQ(answer->gpus.size(), 2u);
  EXPECT_TRUE(answer->migs.empty());
}

TEST(NvmlQueryCommand, NvmlFailureExits4WithTheReason) {
  auto r = run_command({kBinary, "nvml-query", "--library", kFakeNvml}, 10s, {"FAKE_NVML_MODE=fail"});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(contains(r.err, "nvmlInit_v2 failed: Driver Not Loaded (9)")) << r.err;
}

TEST(NvmlQueryCommand, MissingLibraryExits3) {
  auto r = run_command({kBinary, "nvml-query", "--library", "/nonexistent/libnvidia-ml.so.1"}, 10s);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_TRUE(contains(r.err, "cannot load /nonexistent/libnvidia-ml.so.1")) << r.err;
}

TEST(NvmlQueryCommand, LibraryThatIsNotNvmlExits3) {
  auto r = run_command({kBinary, "nvml-query", "--library", "libm.so.6"}, 10s);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_TRUE(contains(r.err, "libm.so.6 has no nvmlInit_v2")) << r.err;
}

TEST(RunNvmlQuery, ReturnsTheAnswer) {
  ScopedEnv mode("FAKE_NVML_MODE", "ok");
  ScopedEnv devices("FAKE_NVML_DEVICES", kDevices.substr(kDevices.find('=') + 1).c_str());
  auto answer = run_nvml_query(kBinary, kFakeNvml, 10s);
  ASSERT_TRUE(answer.ok()) << answer.error().message;
  expect_h20_answer(*answer);
}

TEST(RunNvmlQuery, NvmlFailureIsAClearError) {
  ScopedEnv mode("FAKE_NVML_MODE", "fail");
  auto answer = run_nvml_query(kBinary, kFakeNvml, 10s);
  ASSERT_FALSE(answer.ok());
  EXPECT_TRUE(contains(answer.error().message, "exited with status 4")) << answer.error().message;
  EXPECT_TRUE(contains(answer.error().message, "nvmlInit_v2 failed: Driver Not Loaded (9)")) << answer.error().message;
}

TEST(RunNvmlQuery, MissingLibraryIsAClearError) {
  auto answer = run_nvml_query(kBinary, "/nonexistent/libnvidia-ml.so.1", 10s);
  ASSERT_FALSE(answer.ok());
  EXPECT_TRUE(contains(answer.error().message, "exited with status 3")) << answer.error().message;
  EXPECT_TRUE(contains(answer.error().message, "cannot load /nonexistent/libnvidia-ml.so.1")) << answer.error().message;
}

pid_t killed_pid(const std::string& message) {
  auto at = message.find("(killed pid ");
  if (at == std::string::npos) return -1;
  return static_cast<pid_t>(std::atoi(message.c_str() + at + 12));
}

TEST(RunNvmlQuery, HangingNvmlIsKilledAtTheDeadline) {
  ScopedEnv mode("FAKE_NVML_MODE", "hang");
  auto begin = std::chrono::steady_clock::now();
  auto answer = run_nvml_query(kBinary, kFakeNvml, 500ms);
  auto took = std::chrono::steady_clock::now() - begin;

  ASSERT_FALSE(answer.ok());
  EXPECT_TRUE(contains(answer.error().message, "NVML did not answer within 0.5s (killed pid "))
      << answer.error().message;
  EXPECT_GE(took, 500ms);
  EXPECT_LT(took, 2s);
  pid_t pid = killed_pid(answer.error().message);
  ASSERT_GT(pid, 0) << answer.error().message;
  // Gone and reaped: a zombie would still answer kill(pid, 0).
  EXPECT_TRUE(process_gone(pid));

  // The killed child left nothing behind that blocks the next query.
  ScopedEnv ok("FAKE_NVML_MODE", "ok");
  auto next = run_nvml_query(kBinary, kFakeNvml, 10s);
  EXPECT_TRUE(next.ok()) << next.error().message;
}

TEST(NvmlQuery, DestructorKillsAndReapsARunningChild) {
  ScopedEnv mode("FAKE_NVML_MODE", "hang");
  pid_t pid = -1;
  {
    auto query = NvmlQuery::start(kBinary, kFakeNvml);
    ASSERT_TRUE(query.ok()) << query.error().message;
    pid = query->pid();
    ASSERT_GT(pid, 0);
    EXPECT_FALSE(query->read_available());
    EXPECT_FALSE(process_gone(pid));
  }
  EXPECT_TRUE(process_gone(pid));
}

TEST(NvmlQuery, MovedQueryKeepsTheChild) {
  ScopedEnv mode("FAKE_NVML_MODE", "hang");
  auto started = NvmlQuery::start(kBinary, kFakeNvml);
  ASSERT_TRUE(started.ok()) << started.error().message;
  NvmlQuery query = std::move(*started);
  pid_t pid = query.pid();
  EXPECT_EQ(started->pid(), -1);
  EXPECT_FALSE(process_gone(pid));
  query.kill();
  EXPECT_TRUE(process_gone(pid));
}

TEST(NvmlQuery, ChildGetsDevNullStdinTheArgumentsAndNoLeakedFds) {
  test::TempDir dir("gdw-nvml");
  // An fd without O_CLOEXEC, as a careless library elsewhere in the daemon might leave one.
  int leaky = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(leaky, 3);
  std::string fd = std::to_string(leaky);
  std::string script = write_script(
      dir, "fake-gpu-devwatch",
      "[ \"$1 $2 $3\" = 'nvml-query --library /x/libnvml.so' ] || { echo \"args: $*\" >&2; exit 9; }\n"
      "[ \"$(readlink /proc/$$/fd/0)\" = /dev/null ] || { echo 'stdin not /dev/null' >&2; exit 9; }\n"
      "[ -e /proc/$$/fd/" + fd + " ] && { echo 'fd " + fd + " leaked' >&2; exit 9; }\n"
      "echo '{\"driver_version\": \"script\", \"gpus\": [], \"migs\": []}'\n");
  auto answer = run_nvml_query(script, "/x/libnvml.so", 10s);
  ::close(leaky);
  ASSERT_TRUE(answer.ok()) << answer.error().message;
  EXPECT_EQ(answer->driver_version, "script");
}

TEST(NvmlQuery, OversizedOutputIsRefused) {
  test::TempDir dir("gdw-nvml");
  std::string script = write_script(dir, "chatty", "head -c 3000000 /dev/zero | tr '\\0' x\n");
  auto answer = run_nvml_query(script, "lib", 10s);
  ASSERT_FALSE(answer.ok());
  EXPECT_TRUE(contains(answer.error().message, "printed more than 1048576 bytes; killed")) << answer.error().message;
}

TEST(NvmlQuery, GarbageAnswerIsAnError) {
  test::TempDir dir("gdw-nvml");
  std::string script = write_script(dir, "garbage", "echo 'not json'\n");
  auto answer = run_nvml_query(script, "lib", 10s);
  ASSERT_FALSE(answer.ok());
  EXPECT_TRUE(contains(answer.error().message, "NVML answer is not valid JSON (exited with status 0)"))
      << answer.error().message;
}

TEST(NvmlQuery, StderrIsBoundedInTheMessage) {
  test::TempDir dir("gdw-nvml");
  std::string script = write_script(dir, "noisy", "head -c 200000 /dev/zero | tr '\\0' e >&2\nexit 4\n");
  auto answer = run_nvml_query(script, "lib", 10s);
  ASSERT_FALSE(answer.ok());
  EXPECT_TRUE(contains(answer.error().message, "exited with status 4: eee")) << answer.error().message.substr(0, 200);
  EXPECT_LT(answer.error().message.size(), 5000u);
}

TEST(NvmlQuery, UnexecutableBinaryIsAnError) {
  auto answer = run_nvml_query("/nonexistent/gpu-devwatch", kFakeNvml, 10s);
  ASSERT_FALSE(answer.ok());
  EXPECT_TRUE(contains(answer.error().message,
                       "exited with status 127: nvml-query: cannot execute /nonexistent/gpu-devwatch"))
      << answer.error().message;
}

}  // namespace
}  // namespace gdw
