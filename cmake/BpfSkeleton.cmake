# gdw_bpf_skeleton(<name> <source.bpf.c> [headers...])
#
# Builds a CO-RE BPF object from <source.bpf.c> with clang and generates <name>.skel.h
# with `bpftool gen skeleton`. Consumers link the INTERFACE target <name>_skel, which
# carries the include directories for <name>.skel.h and for the headers next to the
# source (the event structs shared by kernel and user space) and makes them build first.
#
# vmlinux.h is dumped from the build machine's /sys/kernel/btf/vmlinux once per build
# tree. The programs use CO-RE relocations, so the object still loads on kernels whose
# structs differ from the build machine's.

find_program(GDW_CLANG NAMES clang clang-14 REQUIRED)
find_program(GDW_LLVM_STRIP NAMES llvm-strip llvm-strip-14 REQUIRED)
find_program(GDW_BPFTOOL NAMES bpftool PATHS /usr/sbin /sbin /usr/local/sbin REQUIRED)
find_path(GDW_LIBBPF_INCLUDE_DIR bpf/bpf_helpers.h HINTS ${LIBBPF_INCLUDE_DIRS} PATHS /usr/include REQUIRED)
set(GDW_KERNEL_BTF /sys/kernel/btf/vmlinux CACHE FILEPATH
    "BTF of the kernel whose types vmlinux.h is generated from")

# bpf_tracing.h picks its pt_regs layout from __TARGET_ARCH_<arch>.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64|i.86)$")
  set(GDW_BPF_TARGET_ARCH x86)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64)$")
  set(GDW_BPF_TARGET_ARCH arm64)
else()
  message(FATAL_ERROR "gdw_bpf_skeleton: no BPF target arch for ${CMAKE_SYSTEM_PROCESSOR}")
endif()

set(GDW_VMLINUX_DIR ${CMAKE_BINARY_DIR}/bpf-vmlinux)
set(GDW_VMLINUX_H ${GDW_VMLINUX_DIR}/vmlinux.h)

function(gdw_bpf_skeleton name source)
  set(headers ${ARGN})
  get_filename_component(source_abs ${source} ABSOLUTE)
  get_filename_component(source_dir ${source_abs} DIRECTORY)
  set(headers_abs "")
  foreach(h ${headers})
    get_filename_component(h_abs ${h} ABSOLUTE)
    list(APPEND headers_abs ${h_abs})
  endforeach()

  # One rule for vmlinux.h in the whole build tree, however many skeletons there are.
  if(NOT TARGET gdw_vmlinux_h)
    add_custom_command(
      OUTPUT ${GDW_VMLINUX_H}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${GDW_VMLINUX_DIR}
      COMMAND ${GDW_BPFTOOL} btf dump file ${GDW_KERNEL_BTF} format c > ${GDW_VMLINUX_H}.tmp
      COMMAND ${CMAKE_COMMAND} -E rename ${GDW_VMLINUX_H}.tmp ${GDW_VMLINUX_H}
      COMMENT "Generating vmlinux.h from ${GDW_KERNEL_BTF}"
      VERBATIM)
    add_custom_target(gdw_vmlinux_h DEPENDS ${GDW_VMLINUX_H})
  endif()

  set(out_dir ${CMAKE_CURRENT_BINARY_DIR}/${name}_skel)
  set(object ${out_dir}/${name}.bpf.o)
  set(skeleton ${out_dir}/${name}.skel.h)

  add_custom_command(
    OUTPUT ${object}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${out_dir}
    COMMAND ${GDW_CLANG} -O2 -g -target bpf -D__TARGET_ARCH_${GDW_BPF_TARGET_ARCH}
            -Wall
            -I${GDW_VMLINUX_DIR} -I${source_dir} -I${GDW_LIBBPF_INCLUDE_DIR}
            -c ${source_abs} -o ${object}
    # DWARF is only for humans; the skeleton embeds the object, BTF stays.
    COMMAND ${GDW_LLVM_STRIP} -g ${object}
    DEPENDS ${source_abs} ${headers_abs} ${GDW_VMLINUX_H}
    COMMENT "Compiling BPF object ${name}.bpf.o"
    VERBATIM)

  add_custom_command(
    OUTPUT ${skeleton}
    COMMAND ${GDW_BPFTOOL} gen skeleton ${object} name ${name} > ${skeleton}.tmp
    COMMAND ${CMAKE_COMMAND} -E rename ${skeleton}.tmp ${skeleton}
    DEPENDS ${object}
    COMMENT "Generating BPF skeleton ${name}.skel.h"
    VERBATIM)

  add_custom_target(${name}_skel_gen DEPENDS ${skeleton})
  add_dependencies(${name}_skel_gen gdw_vmlinux_h)

  add_library(${name}_skel INTERFACE)
  target_include_directories(${name}_skel INTERFACE ${out_dir} ${source_dir})
  add_dependencies(${name}_skel ${name}_skel_gen)
endfunction()
