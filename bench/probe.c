/*
 * bench/probe.c: how fast this machine's core runs code, measured the same
 * way on every machine, so that a run's figures can be told apart by what
 * the machine did rather than what the proxies did (bench/README.md, "Why
 * the Wasm rows vary from machine to machine"). bench/run.sh builds it and
 * runs it pinned to the targets' core before and after the measurements.
 *
 * Each figure is the best of several repetitions (the least disturbed), in
 * nanoseconds:
 *   add_chain_ns   one add of a dependent chain: the core's clock as code
 *                  sees it (one add a cycle on every x86_64 of this decade)
 *   add_wide_ns    one add of eight independent chains: what the core's
 *                  execution units give this thread (a busy SMT sibling
 *                  takes its share of them)
 *   chase_*_ns     one load of a random pointer chase over a working set:
 *                  32 KiB (L1), 1 MiB (L2), 16 MiB (L3), and 512 MiB with
 *                  4 KiB pages and with 2 MiB pages, where every load also
 *                  misses the TLB and walks the guest's and the host's page
 *                  tables (the difference between the two is what a
 *                  hypervisor's backing of the guest's memory costs a page
 *                  walk)
 *   first_touch_ns one first write to a 4 KiB page of memory never touched
 *                  by this process: a guest page fault, and where the host
 *                  backs guest memory lazily (a fresh machine), a host fault
 *                  as well
 *
 * Output: one line of JSON. Build: cc -O2 -o probe probe.c
 *
 * `probe --shared-cache` prints one figure, in a fraction of a second: a load
 * of the chase over 4 MiB (the median of seven), beyond a core's L2 (four
 * times the AMD EPYC machines', twice the Intel Xeon ones') and within its
 * share of the L3 on an unshared machine (about 15 ns on the AMD machines
 * here when the L3 serves it, 36 ns on the Intel one of 2026-12-05; 140-150
 * ns when the neighbours' use of it leaves this machine next to none and
 * the load goes to memory). run.sh takes it
 * before every throughput window, because it moves within minutes.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* The loop bodies are asm so the compiler can neither fold nor vectorise them. */
static double add_chain_ns(long n)
{
    uint64_t a = 1;
    double start = now_ns();
    for (long i = 0; i < n; i++)
        __asm__ volatile("add %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\t"
                         "add %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\tadd %0, %0"
                         : "+r"(a));
    return (now_ns() - start) / ((double)n * 8);
}

static double add_wide_ns(long n)
{
    uint64_t a = 1, b = 2, c = 3, d = 4, e = 5, f = 6, g = 7, h = 8;
    double start = now_ns();
    for (long i = 0; i < n; i++)
        __asm__ volatile("add %0, %0\n\tadd %1, %1\n\tadd %2, %2\n\tadd %3, %3\n\t"
                         "add %4, %4\n\tadd %5, %5\n\tadd %6, %6\n\tadd %7, %7"
                         : "+r"(a), "+r"(b), "+r"(c), "+r"(d), "+r"(e), "+r"(f), "+r"(g), "+r"(h));
    return (now_ns() - start) / ((double)n * 8);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15u;

static uint64_t next_random(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* A single random cycle through SIZE bytes, one pointer per 64-byte line
 * (Sattolo's shuffle), so every load depends on the one before. */
static void **make_chase(size_t size, int huge)
{
    size_t lines = size / 64;
    void **base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return NULL;
    madvise(base, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    size_t *order = malloc(lines * sizeof *order);
    if (order == NULL) {
        munmap(base, size);
        return NULL;
    }
    for (size_t i = 0; i < lines; i++)
        order[i] = i;
    for (size_t i = lines - 1; i > 0; i--) {
        size_t j = next_random() % i;
        size_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (size_t i = 0; i < lines; i++)
        base[order[i] * 8] = &base[order[(i + 1) % lines] * 8];
    free(order);
    return base;
}

static double chase_ns(void **start, long loads)
{
    void **p = start;
    double begin = now_ns();
    for (long i = 0; i < loads; i++)
        p = (void **)*p;
    double elapsed = now_ns() - begin;
    __asm__ volatile("" : : "r"(p));
    return elapsed / (double)loads;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* N chases of LOADS loads over SIZE bytes, after one to warm the caches and
 * the TLB, into RUNS in ascending order; false when the memory is refused. */
static int sorted_chases(size_t size, int huge, long loads, double *runs, int n)
{
    void **chase = make_chase(size, huge);
    if (chase == NULL)
        return 0;
    chase_ns(chase, loads / 4);
    for (int r = 0; r < n; r++)
        runs[r] = chase_ns(chase, loads);
    munmap(chase, size);
    qsort(runs, n, sizeof runs[0], compare_doubles);
    return 1;
}

/* The best of three: what the caches give when least disturbed. */
static double best_chase_ns(size_t size, int huge, long loads)
{
    double runs[3];
    return sorted_chases(size, huge, loads, runs, 3) ? runs[0] : -1;
}

/* The median of seven with 4 KiB pages: what the caches give now, disturbed
 * or not (the best of them would hide it). */
static double median_chase_ns(size_t size, long loads)
{
    double runs[7];
    return sorted_chases(size, 0, loads, runs, 7) ? runs[3] : -1;
}

static double first_touch_ns(size_t size)
{
    char *region = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED)
        return -1;
    madvise(region, size, MADV_NOHUGEPAGE);
    double start = now_ns();
    for (size_t off = 0; off < size; off += 4096)
        region[off] = 1;
    double ns = (now_ns() - start) / (double)(size / 4096);
    munmap(region, size);
    return ns;
}

static double best_of(double (*f)(long), long n)
{
    double best = 1e18;
    for (int r = 0; r < 7; r++) {
        double ns = f(n);
        if (ns < best)
            best = ns;
    }
    return best;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--shared-cache") == 0) {
        printf("%.1f\n", median_chase_ns(4 << 20, 200 * 1000));
        return 0;
    }
    double chain = best_of(add_chain_ns, 20 * 1000 * 1000);
    double wide = best_of(add_wide_ns, 20 * 1000 * 1000);
    double l1 = best_chase_ns(32 << 10, 0, 20 * 1000 * 1000);
    double l2 = best_chase_ns(1 << 20, 0, 10 * 1000 * 1000);
    double l3 = best_chase_ns(16 << 20, 0, 4 * 1000 * 1000);
    double far4k = best_chase_ns((size_t)512 << 20, 0, 2 * 1000 * 1000);
    double far2m = best_chase_ns((size_t)512 << 20, 1, 2 * 1000 * 1000);
    double touch = first_touch_ns((size_t)256 << 20);
    printf("{\"add_chain_ns\": %.4f, \"add_wide_ns\": %.4f, \"chase_32k_ns\": %.2f, \"chase_1m_ns\": %.2f, "
           "\"chase_16m_ns\": %.2f, \"chase_512m_4k_pages_ns\": %.1f, \"chase_512m_2m_pages_ns\": %.1f, "
           "\"first_touch_ns\": %.0f}\n",
           chain, wide, l1, l2, l3, far4k, far2m, touch);
    return 0;
}
