/* zblk: one handle on any zoned target (docs/library.md, "The C header"). Calls return 0 or a negative errno; zblk_last_error() says why. */

#ifndef ZBLK_H
#define ZBLK_H

/* Made by cbindgen from crates/capi/src/lib.rs: do not edit (ZBLK_BLESS=1 cargo test -p zblk-capi --test header makes it again). */

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

// An open zoned target (opaque): made by [`zblk_open`], freed by [`zblk_close`].
typedef struct ZblkHandle ZblkHandle;

// How to open a target; a NULL `ZblkOptions *` is every default.
typedef struct ZblkOptions {
  // The issue policy's name (`"zwp"`, `"qd1"`, `"batch"`, `"pipeline"`, ...), or
  // NULL for the device's own.
  const char *policy;
  // Requests the device is given at once, 1 to 4096; 0 for the default (64).
  uint32_t queue_depth;
  // Non-zero: writes, zone operations and flushes fail; an image is not repaired.
  int read_only;
} ZblkOptions;

// The target's geometry.
typedef struct ZblkInfo {
  // Its size, bytes.
  uint64_t capacity;
  // A zone's size, bytes.
  uint64_t zone_size;
  // The logical block size, bytes: every offset and length is a multiple of it.
  uint64_t block_size;
  // Its zones.
  uint32_t nr_zones;
} ZblkInfo;

// A zone as the device reports it, in bytes; `zone_type` and `cond` are the kernel's
// `BLK_ZONE_TYPE_*` and `BLK_ZONE_COND_*` values (libzbd's `ZBD_ZONE_TYPE_*` and
// `ZBD_ZONE_COND_*`).
typedef struct ZblkZone {
  // Its first byte.
  uint64_t start;
  // Its size.
  uint64_t len;
  // The bytes that can be written in it.
  uint64_t capacity;
  // Its write pointer.
  uint64_t wp;
  // 1 conventional, 2 sequential write required, 3 sequential write preferred.
  uint32_t zone_type;
  // 1 EMPTY, 2 implicitly open, 3 explicitly open, 4 CLOSED, 13 READONLY, 14 FULL,
  // 15 OFFLINE (0 for a conventional zone).
  uint32_t cond;
} ZblkZone;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// The words of the last call on this thread that failed: valid until the next
// failing call on this thread; an empty string before any.
const char *zblk_last_error(void);

// Opens the target `spec` names (an image path, a Linux zoned block device, an
// NVMe generic device `/dev/ngXnY`, `sim:PRESET[:name=value,...]`, a simulated
// stack `stack:SPEC`) with `opts` (NULL: the defaults); `*out` is the handle, or
// NULL on failure.
//
// # Safety
// `spec` is a NUL-terminated string; `opts` is NULL or valid; `out` points to
// writable memory.
int zblk_open(const char *spec, const struct ZblkOptions *opts, struct ZblkHandle **out);

// Waits for every request on the handle, closes the target (an image commits its
// tables) and frees the handle, even when closing fails. NULL does nothing.
//
// # Safety
// `h` is NULL or a handle from [`zblk_open`] not closed yet, which no other call
// uses now or later.
int zblk_close(struct ZblkHandle *h);

// The target's geometry into `*info`.
//
// # Safety
// `h` is an open handle; `info` points to writable memory.
int zblk_info(const struct ZblkHandle *h, struct ZblkInfo *info);

// Reports zones from the one holding byte `offset`: at most `*nr_zones` of them
// into `zones`; `*nr_zones` becomes the number reported (as libzbd's
// `zbd_report_zones`).
//
// # Safety
// `h` is an open handle; `nr_zones` points to a writable count and `zones` to that
// many writable `ZblkZone`s.
int zblk_report_zones(const struct ZblkHandle *h,
                      uint64_t offset,
                      struct ZblkZone *zones,
                      uint32_t *nr_zones);

// Writes `len` bytes at `offset` and waits; in a sequential zone at its write
// pointer.
//
// # Safety
// `h` is an open handle; `buf` points to `len` readable bytes.
int zblk_write_at(const struct ZblkHandle *h, uint64_t offset, const void *buf, size_t len);

// Appends `len` bytes to the zone starting at byte `zone`, waits, and sets
// `*landed` (if not NULL) to the byte offset where they landed: zone append,
// emulated where the device has none.
//
// # Safety
// `h` is an open handle; `buf` points to `len` readable bytes; `landed` is NULL or
// writable.
int zblk_append(const struct ZblkHandle *h,
                uint64_t zone,
                const void *buf,
                size_t len,
                uint64_t *landed);

// Reads `len` bytes at `offset` into `buf` and waits (zeroes past a write pointer).
//
// # Safety
// `h` is an open handle; `buf` points to `len` writable bytes.
int zblk_read_at(const struct ZblkHandle *h, uint64_t offset, void *buf, size_t len);

// Resets the zone starting at byte `zone`: its write pointer back to its start.
//
// # Safety
// `h` is an open handle.
int zblk_reset_zone(const struct ZblkHandle *h, uint64_t zone);

// Opens the zone starting at byte `zone` explicitly.
//
// # Safety
// `h` is an open handle.
int zblk_open_zone(const struct ZblkHandle *h, uint64_t zone);

// Closes the zone starting at byte `zone`.
//
// # Safety
// `h` is an open handle.
int zblk_close_zone(const struct ZblkHandle *h, uint64_t zone);

// Finishes the zone starting at byte `zone`: it becomes FULL.
//
// # Safety
// `h` is an open handle.
int zblk_finish_zone(const struct ZblkHandle *h, uint64_t zone);

// Makes every completed write durable, with its zone's write pointer, and waits.
//
// # Safety
// `h` is an open handle.
int zblk_flush(const struct ZblkHandle *h);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* ZBLK_H */
