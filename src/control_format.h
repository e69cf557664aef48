/* Pieces of the control-file format shared by the library (control.c) and
 * vmemctl (compiled into both): per-GPU entry names and sizes written as
 * JSON integers too long for a double.  No global state; thread-safe. */
#ifndef VMEM_CONTROL_FORMAT_H
#define VMEM_CONTROL_FORMAT_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* Parses a PCI bus id, "dddd:bb:dd.f" or "bb:dd.f" (hex; domain up to 8
 * digits, bus and device 2, function 1), into one number; -1 if s is not
 * one. */
long long control_pci_bus_id(const char *s);

/* 1 if key can name a device in a control file: a PCI bus id or "sim:N"
 * (N a decimal device ordinal; "sim" in any case). */
int control_gpu_key_valid(const char *key);

/* 1 if the per-GPU keys a and b name the same device: PCI bus ids compare
 * by value ("00000000:3B:00.0" == "0000:3b:00.0" == "3b:00.0"), others
 * ("sim:0") as text ignoring case. */
int control_gpu_key_same(const char *a, const char *b);

/* cJSON reads every number as a double, which is exact only below 2^53.
 * Replaces each number item of root whose literal in text (the len bytes
 * root was parsed from) is an integer of 16 digits or more by an item that
 * keeps the digits: a string (as_raw 0; the library then reads it as a
 * size) or a raw item (as_raw 1; printed back as it was).  Returns 0, or -1
 * if out of memory (root is then still a valid tree). */
int control_json_exact(cJSON *root, const char *text, size_t len, int as_raw);

#endif
