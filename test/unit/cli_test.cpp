// The command line: one table-driven parser for every command, and --help texts that the
// table writes. The fixtures under test/fixtures/cli-help are the texts users and docs know.
#include "app/cli.h"

#include <gtest/gtest.h>

#include "app/cli_args.h"
#include "support/temp_dir.h"

namespace gdw {
namespace {

const std::string kHelp = std::string(GDW_TEST_FIXTURES) + "/cli-help/";

CliAction resolve(std::vector<std::string> args) { return resolve_cli(args); }

constexpr Flag kFlags[] = {
    {"--config", "PATH", "configuration file"},
    {"--json", "", "print JSON"},
};

Result<ParsedArgs> parse(std::vector<std::string> args) { return parse_args(args, kFlags); }

TEST(CliArgs, ReadsSwitchesAndValuesInBothSpellings) {
  auto a = parse({"--json", "--config", "/etc/a.yaml"});
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_TRUE(a->has("--json"));
  EXPECT_EQ(a->value("--config"), "/etc/a.yaml");
  EXPECT_FALSE(a->help);

  auto b = parse({"--config=/etc/b=c.yaml"});
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_FALSE(b->has("--json"));
  EXPECT_EQ(b->value("--config"), "/etc/b=c.yaml") << "only the first '=' splits";
  EXPECT_EQ(b->value("--other", "fallback"), "fallback");
}

TEST(CliArgs, TheLastOfARepeatedValueWinsAndAValueMayLookLikeAnOption) {
  auto a = parse({"--config", "one", "--config", "--json"});
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->value("--config"), "--json");
  EXPECT_FALSE(a->has("--json"));
}

TEST(CliArgs, ErrorsSayWhichArgument) {
  struct Case {
    std::vector<std::string> args;
    std::string error;
  };
  for (const auto& c : std::vector<Case>{{{"--bogus"}, "unknown option '--bogus'"},
                                         {{"--json", "extra"}, "unknown option 'extra'"},
                                         {{"--bogus=1"}, "unknown option '--bogus=1'"},
                                         {{"--config"}, "--config needs a value"},
                                         {{"--json=yes"}, "--json takes no value"},
                                         {{"-json"}, "unknown option '-json'"}}) {
    auto a = parse(c.args);
    ASSERT_FALSE(a) << c.args[0];
    EXPECT_EQ(a.error().message, c.error);
  }
}

TEST(CliArgs, HelpWinsWhereAnOptionMayBe) {
  EXPECT_TRUE(parse({"--help"})->help);
  EXPECT_TRUE(parse({"-h"})->help);
  EXPECT_TRUE(parse({"help"})->help);
  EXPECT_TRUE(parse({"--json", "--help", "--bogus"})->help) << "help before the bad option is seen";
  auto value = parse({"--config", "--help"});
  ASSERT_TRUE(value);
  EXPECT_FALSE(value->help) << "a value is a value";
  EXPECT_FALSE(parse({"--json", "help"})) << "'help' is a command word only first";
}

TEST(CliArgs, HelpLinesAlignAndContinueUnderTheFirst) {
  constexpr Flag flags[] = {{"--library", "PATH", "one\ntwo"}, {"--x", "", "switch"}};
  EXPECT_EQ(flags_synopsis(flags), "[--library PATH] [--x]");
  EXPECT_EQ(flags_help(flags),
            "  --library PATH  one\n"
            "                  two\n"
            "  --x             switch\n");
  EXPECT_EQ(flags_synopsis({}), "");
}

TEST(Cli, HelpTextsAreTheDocumentedOnes) {
  for (const char* top : {"--help", "-h", "help"}) {
    auto a = resolve({top});
    EXPECT_EQ(a.exit_code, 0);
    EXPECT_EQ(a.out, test::read_file(kHelp + "top.txt")) << top;
    EXPECT_EQ(a.err, "");
    EXPECT_EQ(a.command, "");
  }
  for (const char* cmd : {"check", "run", "version"}) {
    for (const char* help : {"--help", "-h", "help"}) {
      auto a = resolve({cmd, help});
      EXPECT_EQ(a.exit_code, 0) << cmd << " " << help;
      EXPECT_EQ(a.out, test::read_file(kHelp + cmd + ".txt")) << cmd << " " << help;
      EXPECT_EQ(a.command, "");
    }
  }
  EXPECT_NE(resolve({"nvml-query", "--help"}).out.find("usage: gpu-devwatch nvml-query [--library PATH]\n"),
            std::string::npos);
  EXPECT_EQ(test::read_file(kHelp + "top.txt").find("nvml-query"), std::string::npos) << "internal: not listed";
}

TEST(Cli, UsageErrorsExitTwoWithTheCommandsUsageOnStderr) {
  auto none = resolve({});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_EQ(none.err, test::read_file(kHelp + "top.txt"));
  EXPECT_EQ(none.out, "");

  auto unknown = resolve({"bogus"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(unknown.err, "gpu-devwatch: unknown command 'bogus'\n\n" + test::read_file(kHelp + "top.txt"));

  struct Case {
    std::vector<std::string> args;
    std::string first_line;
  };
  for (const auto& c : std::vector<Case>{{{"check", "--bogus"}, "gpu-devwatch check: unknown option '--bogus'"},
                                         {{"check", "--config"}, "gpu-devwatch check: --config needs a value"},
                                         {{"check", "--json=1"}, "gpu-devwatch check: --json takes no value"},
                                         {{"run", "--bogus"}, "gpu-devwatch run: unknown option '--bogus'"},
                                         {{"run", "--config"}, "gpu-devwatch run: --config needs a value"},
                                         {{"run", "--json"}, "gpu-devwatch run: unknown option '--json'"},
                                         {{"version", "extra"}, "gpu-devwatch version: unknown option 'extra'"}}) {
    auto a = resolve(c.args);
    EXPECT_EQ(a.exit_code, 2) << c.first_line;
    EXPECT_EQ(a.command, "");
    EXPECT_EQ(a.out, "");
    EXPECT_EQ(a.err, c.first_line + "\n\n" + test::read_file(kHelp + c.args[0] + ".txt"));
  }
}

TEST(Cli, CommandsGetTheirParsedOptions) {
  auto check = resolve({"check", "--json", "--config=/etc/x.yaml", "--repair"});
  EXPECT_EQ(check.command, "check");
  EXPECT_TRUE(check.args.has("--json"));
  EXPECT_TRUE(check.args.has("--repair"));
  EXPECT_EQ(check.args.value("--config"), "/etc/x.yaml");

  auto run = resolve({"run", "--config", "/etc/y.yaml"});
  EXPECT_EQ(run.command, "run");
  EXPECT_EQ(run.args.value("--config"), "/etc/y.yaml");

  auto nvml = resolve({"nvml-query", "--library", "/lib/libnvidia-ml.so.1"});
  EXPECT_EQ(nvml.command, "nvml-query");
  EXPECT_EQ(nvml.args.value("--library"), "/lib/libnvidia-ml.so.1");

  EXPECT_EQ(resolve({"version"}).command, "version");
  EXPECT_EQ(resolve({"--version"}).command, "version") << "--version is the version command";
  EXPECT_EQ(resolve({"--version", "extra"}).exit_code, 2);
}

}  // namespace
}  // namespace gdw
