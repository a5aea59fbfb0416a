// LD_PRELOAD shim for crun in the tests. crun (1.8) sets RLIMIT_MEMLOCK to infinity before
// every BPF_PROG_LOAD and gives up when that fails; on a host where root lacks
// CAP_SYS_RESOURCE (this test machine's sandbox) the raise is refused, although kernels
// since 5.11 charge BPF memory to the cgroup and never look at RLIMIT_MEMLOCK. Only that
// one refusal is turned into success: every other setrlimit call behaves as usual.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/resource.h>

int setrlimit(__rlimit_resource_t resource, const struct rlimit* limit) {
  int (*real)(__rlimit_resource_t, const struct rlimit*) =
      (int (*)(__rlimit_resource_t, const struct rlimit*))dlsym(RTLD_NEXT, "setrlimit");
  if (real == 0) {
    errno = ENOSYS;
    return -1;
  }
  int rc = real(resource, limit);
  if (rc != 0 && errno == EPERM && resource == RLIMIT_MEMLOCK) return 0;
  return rc;
}
