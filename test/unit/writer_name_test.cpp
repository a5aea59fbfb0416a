#include "core/writer_name.h"

#include <gtest/gtest.h>

namespace gdw {
namespace {

TEST(WriterName, RecognisesTheUsualRevokers) {
  struct Case {
    WriterIdentity w;
    const char* want;
  };
  const Case cases[] = {
      {{"runc", "containerd-shim", "/usr/sbin/runc", 4242}, "runc"},
      {{"runc:[2:INIT]", "runc", "", 4243}, "runc"},
      {{"containerd-shim", "systemd", "/usr/bin/containerd-shim-runc-v2", 99}, "containerd-shim"},
      {{"systemd", "", "/usr/lib/systemd/systemd", 1}, "systemd"},
      {{"kworker", "", "", 1}, "systemd"},
      {{"kubelet", "systemd", "/usr/bin/kubelet", 700}, "kubelet"},
      {{"crun", "conmon", "/usr/bin/crun", 800}, "crun"},
      {{"conmon", "systemd", "/usr/bin/conmon", 801}, "cri-o"},
      {{"nvidia-containe", "runc", "/usr/bin/nvidia-container-cli", 802}, "nvidia-container-toolkit"},
      {{"exe", "containerd-shim", "/proc/self/exe", 803}, "runc"},  // runc's child before it renames itself
      {{"bash", "sshd", "/usr/bin/bash", 900}, "other"},
      {{"", "", "", 901}, "other"},
  };
  for (const auto& c : cases) EXPECT_EQ(recognise_writer(c.w), c.want) << c.w.comm << " / " << c.w.exe;
}

}  // namespace
}  // namespace gdw
