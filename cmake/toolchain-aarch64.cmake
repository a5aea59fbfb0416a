# Cross-build for arm64 (aarch64) on an amd64 Debian 12 with Debian's multiarch:
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake
# (scripts/build.sh --arch arm64 does it; scripts/install-deps.sh installs what it needs).
#
# The compiler is g++-aarch64-linux-gnu; the libraries are Debian's :arm64 packages,
# installed beside the amd64 ones (headers in /usr/include, libraries, CMake and pkg-config
# files in /usr/lib/aarch64-linux-gnu), so no sysroot: the cross compiler searches the
# multiarch directories itself. The two -dev packages that cannot be installed for both
# architectures are unpacked into GDW_CROSS_OVERLAY, searched first. The tools the build
# runs (protoc, grpc_cpp_plugin, clang and bpftool for the BPF object) are the host's.
# Tests and the binaries run under qemu-user (CMAKE_CROSSCOMPILING_EMULATOR: ctest runs
# each test, and gtest's test discovery, through it).

set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

set(GDW_CROSS_OVERLAY "$ENV{GDW_CROSS_OVERLAY}")
if(NOT GDW_CROSS_OVERLAY)
  set(GDW_CROSS_OVERLAY /var/cache/gpu-devwatch-cross/arm64)
endif()
if(NOT EXISTS "${GDW_CROSS_OVERLAY}/usr/lib/aarch64-linux-gnu")
  message(FATAL_ERROR "toolchain-aarch64: no ${GDW_CROSS_OVERLAY} (run scripts/install-deps.sh arm64)")
endif()
list(PREPEND CMAKE_PREFIX_PATH "${GDW_CROSS_OVERLAY}/usr")
# No RPATH into the overlay (nor anywhere): the overlay is for linking; at run time the
# loader finds every library, those two's included, in the multiarch directories where
# install-deps.sh installed the :arm64 runtime packages, as on an arm64 node.
set(CMAKE_SKIP_BUILD_RPATH ON)

# Programs from the host; libraries, headers and packages for the target only, from the
# multiarch directories (/usr with lib/aarch64-linux-gnu) and the overlay.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)

# pkg-config (libbpf, libsystemd) reads the arm64 .pc files, not the host's.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "${GDW_CROSS_OVERLAY}/usr/lib/aarch64-linux-gnu/pkgconfig")

find_program(GDW_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(GDW_QEMU_AARCH64)
  # -L: the arm64 loader and libraries, where multiarch installed them (/lib/ld-linux-aarch64.so.1).
  set(CMAKE_CROSSCOMPILING_EMULATOR "${GDW_QEMU_AARCH64};-L;/")
endif()
