#!/usr/bin/env python3
# Writes a zonefs super block (format of Linux's fs/zonefs/zonefs.h) at the start of
# the device's first zone, after resetting it: what mkzonefs does, minus its checks.
import os, struct, sys, uuid, zlib, fcntl
dev = sys.argv[1]
ZONEFS_MAGIC = 0x5a4f4653
body = struct.pack('<II64s16sQIII', ZONEFS_MAGIC, 0, b'', uuid.uuid4().bytes, 0, 0, 0, 0o640)
sb = body + b'\0' * (4096 - len(body))
crc = zlib.crc32(sb) ^ 0xffffffff          # the kernel's crc32(~0, ...) without the final xor
sb = sb[:4] + struct.pack('<I', crc) + sb[8:]
fd = os.open(dev, os.O_RDWR | os.O_DIRECT)
# BLKRESETZONE = _IOW(0x12, 131, struct blk_zone_range {u64 sector, nr_sectors})
zone_sectors = int(open('/sys/block/%s/queue/chunk_sectors' % os.path.basename(dev)).read())
BLKRESETZONE = 0x40101283
try:
    fcntl.ioctl(fd, BLKRESETZONE, struct.pack('<QQ', 0, zone_sectors))
except OSError as e:
    print('reset of zone 0:', e)
import mmap
m = mmap.mmap(-1, 4096); m.write(sb)
os.pwritev(fd, [m], 0) if hasattr(os, 'pwritev') else os.pwrite(fd, m, 0)
os.fsync(fd); os.close(fd)
print('zonefs super block written, crc %08x' % crc)
