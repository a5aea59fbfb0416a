/* The rule list of the device_filter program (bpf/device_filter.bpf.c), as it lies in the
 * program's .rodata. Shared by the BPF program (types from vmlinux.h) and
 * daemon/backend/device_programs_v2.cpp (types from <linux/types.h>), which fills it
 * before load and reads it back from an attached program to learn what it enforces:
 * fixed-size fields only, so both compilers agree on every offset. */
#ifndef GDW_DEVICE_FILTER_H
#define GDW_DEVICE_FILTER_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* A container's spec has a few dozen rules at most; the verifier walks every iteration
 * up to the loaded count, so the bound also bounds the verification cost. */
#define GDW_DEVICE_FILTER_MAX_RULES 256

/* `*` in a rule's major or minor. */
#define GDW_DEVICE_FILTER_ANY 0xffffffffu

/* Device types as the program context reports them (BPF_DEVCG_DEV_BLOCK/CHAR); 0 = any. */
#define GDW_DEVICE_FILTER_TYPE_ALL 0u
#define GDW_DEVICE_FILTER_TYPE_BLOCK 1u
#define GDW_DEVICE_FILTER_TYPE_CHAR 2u

struct gdw_device_filter_rule {
  __u32 type;   /* GDW_DEVICE_FILTER_TYPE_* */
  __u32 major;  /* or GDW_DEVICE_FILTER_ANY */
  __u32 minor;  /* or GDW_DEVICE_FILTER_ANY */
  __u32 access; /* BPF_DEVCG_ACC_* bits: 1 mknod, 2 read, 4 write */
  __u32 allow;  /* 1 allow, 0 deny */
};

struct gdw_device_filter_config {
  __u32 rule_count; /* rules[0, rule_count) are in force, in spec order */
  __u32 reserved;
  struct gdw_device_filter_rule rules[GDW_DEVICE_FILTER_MAX_RULES];
};

#endif /* GDW_DEVICE_FILTER_H */
