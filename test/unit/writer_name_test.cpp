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
      // The comm alone, as an apply's wait names its writer: the kernel cut it at 15 bytes.
      {{"nvidia-containe", "runc", "", 804}, "nvidia-container-toolkit"},
      {{"nvidia-ctk", "runc", "", 805}, "nvidia-container-toolkit"},
      {{"nvidia-smi", "bash", "", 806}, "other"},  // 10 bytes: no cut prefix applies
      {{"containerd-shim", "systemd", "", 807}, "containerd-shim"},  // exactly 15: a whole prefix
      {{"exe", "containerd-shim", "/proc/self/exe", 803}, "runc"},  // runc's child before it renames itself
      {{"bash", "sshd", "/usr/bin/bash", 900}, "other"},
      {{"", "", "", 901}, "other"},
  };
  for (const auto& c : cases) EXPECT_EQ(recognise_writer(c.w), c.want) << c.w.comm << " / " << c.w.exe;
}

}  // namespace
}  // namespace gdw
