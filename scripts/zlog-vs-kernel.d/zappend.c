// Records per second of THREADS threads appending 4 KiB records to one zonefs
// sequential file (O_APPEND | O_DIRECT: the kernel's zone append, if zonefs uses
// it), each thread calling fdatasync after every FLUSH_EVERY of its appends.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *path; static int per_thread, flush_every;
static void *run(void *arg) {
    (void)arg;
    int fd = open(path, O_WRONLY | O_APPEND | O_DIRECT);
    if (fd < 0) { perror("open"); exit(1); }
    void *buf; if (posix_memalign(&buf, 4096, 4096)) exit(1);
    memset(buf, 0xab, 4096);
    for (int i = 1; i <= per_thread; i++) {
        if (write(fd, buf, 4096) != 4096) { perror("write"); exit(1); }
        if (flush_every && i % flush_every == 0 && fdatasync(fd)) { perror("fdatasync"); exit(1); }
    }
    if (fdatasync(fd)) { perror("fdatasync"); exit(1); }
    close(fd); free(buf);
    return NULL;
}
int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: zappend FILE THREADS RECORDS FLUSH_EVERY\n"); return 2; }
    path = argv[1]; int threads = atoi(argv[2]); int records = atoi(argv[3]); flush_every = atoi(argv[4]);
    if (threads < 1 || threads > 64 || records < threads) { fprintf(stderr, "bad arguments\n"); return 2; }
    per_thread = records / threads;
    if (truncate(path, 0)) { perror("truncate (zone reset)"); return 1; }
    struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
    pthread_t t[64];
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, run, NULL);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    printf("%d %d %.0f\n", threads, per_thread * threads, per_thread * threads / s);
    return 0;
}
