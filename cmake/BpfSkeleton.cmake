# gdw_bpf_skeleton(<name> <source.bpf.c> [headers...])
#
# Builds a CO-RE BPF object from <source.bpf.c> with clang and generates <name>.skel.h
# with `bpftool gen skeleton`. Consumers link the INTERFACE target <name>_skel, which
# carries the include directories for <name>.skel.h and for the headers next to the
# source (the event structs shared by kernel and user space) and makes them build first.
#
# The kernel's types come from bpf/vmlinux/<arch>/vmlinux.h, kept in the repository, one
# per target architecture (scripts/gen-vmlinux.sh makes them from the BTF of Debian's own
# kernel packages): the build reads nothing of the build machine's kernel, so a builder
# without BTF and a cross-build for arm64 compile the same object as any other builder.
# The programs use CO-RE relocations, so the object loads on kernels whose structs differ
# from the header's.

find_program(GDW_CLANG NAMES clang clang-14 REQUIRED)
find_program(GDW_LLVM_STRIP NAMES llvm-strip llvm-strip-14 REQUIRED)
find_program(GDW_BPFTOOL NAMES bpftool PATHS /usr/sbin /sbin /usr/local/sbin REQUIRED)
find_path(GDW_LIBBPF_INCLUDE_DIR bpf/bpf_helpers.h HINTS ${LIBBPF_INCLUDE_DIRS} PATHS /usr/include REQUIRED)

# bpf_tracing.h picks its pt_regs layout from __TARGET_ARCH_<arch>.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64|i.86)$")
  set(GDW_BPF_TARGET_ARCH x86)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64)$")
  set(GDW_BPF_TARGET_ARCH arm64)
else()
  message(FATAL_ERROR "gdw_bpf_skeleton: no BPF target arch for ${CMAKE_SYSTEM_PROCESSOR}")
endif()

set(GDW_VMLINUX_DIR ${PROJECT_SOURCE_DIR}/bpf/vmlinux/${GDW_BPF_TARGET_ARCH})
set(GDW_VMLINUX_H ${GDW_VMLINUX_DIR}/vmlinux.h)
if(NOT EXISTS ${GDW_VMLINUX_H})
  message(FATAL_ERROR "gdw_bpf_skeleton: no ${GDW_VMLINUX_H} (scripts/gen-vmlinux.sh makes it)")
endif()

function(gdw_bpf_skeleton name source)
  set(headers ${ARGN})
  get_filename_component(source_abs ${source} ABSOLUTE)
  get_filename_component(source_dir ${source_abs} DIRECTORY)
  set(headers_abs "")
  foreach(h ${headers})
    get_filename_component(h_abs ${h} ABSOLUTE)
    list(APPEND headers_abs ${h_abs})
  endforeach()

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

  add_library(${name}_skel INTERFACE)
  target_include_directories(${name}_skel INTERFACE ${out_dir} ${source_dir})
  add_dependencies(${name}_skel ${name}_skel_gen)
endfunction()
