/*
 * Appends records to one zone through zblk's C face, reads each back, and shows a
 * refused write with its errno and rule.
 *
 *     cc -o append append.c -Icrates/capi/include -Ltarget/release -lzblk_capi
 *     ./append [TARGET]      (default: sim:nullb:zone_size=4,size=64)
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "zblk.h"

#define RECORDS 8
#define RECORD 4096

static int fail(const char *what, int ret)
{
	fprintf(stderr, "%s: %s (%d)\n", what, zblk_last_error(), ret);
	return 1;
}

int main(int argc, char **argv)
{
	const char *target = argc > 1 ? argv[1] : "sim:nullb:zone_size=4,size=64";
	ZblkHandle *h;
	ZblkInfo info;
	ZblkZone zones[4];
	uint32_t nr = 4;
	uint64_t landed[RECORDS];
	static char rec[RECORD], back[RECORD];
	int ret, i;

	ret = zblk_open(target, NULL, &h);
	if (ret)
		return fail("open", ret);
	zblk_info(h, &info);
	printf("%s: %llu bytes, %u zones of %llu bytes\n", target, (unsigned long long)info.capacity,
	       info.nr_zones, (unsigned long long)info.zone_size);

	/* The second zone: reset it, then append records to it. */
	uint64_t zone = info.zone_size;
	ret = zblk_reset_zone(h, zone);
	if (ret)
		return fail("reset", ret);
	for (i = 0; i < RECORDS; i++) {
		memset(rec, 'a' + i, RECORD);
		ret = zblk_append(h, zone, rec, RECORD, &landed[i]);
		if (ret)
			return fail("append", ret);
		printf("record %d at byte %llu\n", i, (unsigned long long)landed[i]);
	}
	ret = zblk_flush(h);
	if (ret)
		return fail("flush", ret);
	for (i = 0; i < RECORDS; i++) {
		ret = zblk_read_at(h, landed[i], back, RECORD);
		if (ret)
			return fail("read", ret);
		if (back[0] != 'a' + i || back[RECORD - 1] != 'a' + i) {
			fprintf(stderr, "record %d read back wrong\n", i);
			return 1;
		}
	}
	ret = zblk_report_zones(h, zone, zones, &nr);
	if (ret)
		return fail("report", ret);
	printf("zone at %llu: wp %llu, cond %u\n", (unsigned long long)zones[0].start,
	       (unsigned long long)zones[0].wp, zones[0].cond);

	/* A write behind the write pointer is refused with EIO, and says why. */
	ret = zblk_write_at(h, zone, rec, RECORD);
	printf("write at the zone's start: %d (%s): %s\n", ret, ret == -EIO ? "-EIO" : "?", zblk_last_error());
	if (ret != -EIO)
		return 1;
	return zblk_close(h) ? fail("close", -1) : 0;
}
