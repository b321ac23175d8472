/* Stand-alone driver for the fuzz harnesses, for builds without libFuzzer
 * (gcc -fsanitize=address,undefined): it runs LLVMFuzzerTestOneInput on every
 * file named on the command line (directories: every file in them, sorted),
 * then, with -mutate=N, on N random mutations of those inputs (seeded with
 * -seed=S, default 1; deterministic).  A finding aborts (sanitizer report or
 * the harness's own check), so the exit status is non-zero.
 *
 *   fuzz_aead_replay [-mutate=N] [-seed=S] [-max_len=L] [-artifact_prefix=P] DIR|FILE...
 *
 * When an input fails (sanitizer death or abort), it is written to
 * P + "crash-" + 16 hex digits of its FNV-1a hash, as libFuzzer does.
 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct { uint8_t *d; size_t n; char *name; } input_t;
static input_t *inputs;
static size_t n_inputs, cap_inputs;

static void add_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *d = malloc(n ? (size_t)n : 1);
    if (!d || (n && fread(d, 1, (size_t)n, f) != (size_t)n)) { perror(path); exit(2); }
    fclose(f);
    if (n_inputs == cap_inputs) {
        cap_inputs = cap_inputs ? 2 * cap_inputs : 64;
        inputs = realloc(inputs, cap_inputs * sizeof *inputs);
        if (!inputs) exit(2);
    }
    inputs[n_inputs].d = d;
    inputs[n_inputs].n = (size_t)n;
    inputs[n_inputs].name = strdup(path);
    n_inputs++;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void add_path(const char *path)
{
    struct stat st;
    if (stat(path, &st)) { perror(path); exit(2); }
    if (!S_ISDIR(st.st_mode)) { add_file(path); return; }
    DIR *dir = opendir(path);
    if (!dir) { perror(path); exit(2); }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) { cap = cap ? 2 * cap : 64; names = realloc(names, cap * sizeof *names); }
        size_t l = strlen(path) + strlen(e->d_name) + 2;
        names[n] = malloc(l);
        snprintf(names[n], l, "%s/%s", path, e->d_name);
        n++;
    }
    closedir(dir);
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) add_file(names[i]);
        free(names[i]);
    }
    free(names);
}

/* The input being run, for the crash file. */
static const uint8_t *cur_data;
static size_t cur_size;
static const char *artifact_prefix = "./";

static void write_crash(void)
{
    static volatile sig_atomic_t done;
    if (done || !cur_data) return;
    done = 1;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < cur_size; i++) h = (h ^ cur_data[i]) * 0x100000001b3ULL;
    char path[4096];
    static const char hex[] = "0123456789abcdef";
    size_t pl = strlen(artifact_prefix);
    if (pl > sizeof path - 40) pl = sizeof path - 40;
    memcpy(path, artifact_prefix, pl);
    memcpy(path + pl, "crash-", 6);
    for (int i = 0; i < 16; i++) path[pl + 6 + i] = hex[(h >> (60 - 4 * i)) & 15];
    path[pl + 22] = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        size_t off = 0;
        while (off < cur_size) {
            ssize_t w = write(fd, cur_data + off, cur_size - off);
            if (w <= 0) break;
            off += (size_t)w;
        }
        close(fd);
        static const char msg[] = "replay: the failing input was written to ";
        (void)!write(2, msg, sizeof msg - 1);
        (void)!write(2, path, strlen(path));
        (void)!write(2, "\n", 1);
    }
}

static void on_signal(int sig)
{
    write_crash();
    signal(sig, SIG_DFL);
    raise(sig);
}

void __sanitizer_set_death_callback(void (*callback)(void));

static void run_one(const uint8_t *d, size_t n)
{
    /* a private copy of exactly the input's size, as libFuzzer does */
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy) abort();
    memcpy(copy, d, n);
    cur_data = copy;
    cur_size = n;
    LLVMFuzzerTestOneInput(copy, n);
    cur_data = NULL;
    free(copy);
}

static uint64_t rng_state = 1;
static uint64_t rnd(void) {   /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* A libFuzzer-like mutation: a few byte-level edits, sometimes a splice. */
static size_t mutate(uint8_t *d, size_t n, size_t max_len)
{
    int edits = 1 + (int)(rnd() % 4);
    for (int e = 0; e < edits; e++) {
        switch (rnd() % 7) {
        case 0: if (n) d[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8)); break;
        case 1: if (n) d[rnd() % n] = (uint8_t)rnd(); break;
        case 2: if (n < max_len) { size_t at = rnd() % (n + 1); memmove(d + at + 1, d + at, n - at); d[at] = (uint8_t)rnd(); n++; } break;
        case 3: if (n) { size_t at = rnd() % n; memmove(d + at, d + at + 1, n - at - 1); n--; } break;
        case 4: if (n) n = rnd() % n; break;
        case 5: if (n >= 2) { static const uint8_t v[] = {0, 1, 0x7f, 0x80, 0xff, 16, 32, 64};
                    d[rnd() % n] = v[rnd() % sizeof v]; } break;
        case 6: if (n_inputs) { input_t *o = &inputs[rnd() % n_inputs];
                    if (o->n) { size_t from = rnd() % o->n, at = n ? rnd() % n : 0;
                        size_t k = 1 + rnd() % (o->n - from);
                        if (at + k > max_len) k = max_len - at;
                        memcpy(d + at, o->d + from, k);
                        if (at + k > n) n = at + k; } } break;
        }
    }
    return n;
}

int main(int argc, char **argv)
{
    long mutations = 0;
    size_t max_len = 8192;
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "-mutate=", 8)) mutations = atol(argv[i] + 8);
        else if (!strncmp(argv[i], "-seed=", 6)) rng_state = strtoull(argv[i] + 6, NULL, 10);
        else if (!strncmp(argv[i], "-max_len=", 9)) max_len = (size_t)atol(argv[i] + 9);
        else if (!strncmp(argv[i], "-artifact_prefix=", 17)) artifact_prefix = argv[i] + 17;
        else if (argv[i][0] == '-') { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
        else add_path(argv[i]);
    }
    __sanitizer_set_death_callback(write_crash);
    signal(SIGABRT, on_signal);
    signal(SIGSEGV, on_signal);
    signal(SIGBUS, on_signal);
    signal(SIGFPE, on_signal);
    signal(SIGILL, on_signal);
    for (size_t i = 0; i < n_inputs; i++) {
        fprintf(stderr, "replay: %s\n", inputs[i].name);
        run_one(inputs[i].d, inputs[i].n);
    }
    fprintf(stderr, "replayed %zu inputs\n", n_inputs);
    if (mutations > 0) {
        uint8_t *work = malloc(max_len + 1);
        for (long m = 0; m < mutations; m++) {
            size_t n = 0;
            if (n_inputs) {
                input_t *in = &inputs[rnd() % n_inputs];
                n = in->n < max_len ? in->n : max_len;
                memcpy(work, in->d, n);
            }
            n = mutate(work, n, max_len);
            run_one(work, n);
        }
        free(work);
        fprintf(stderr, "ran %ld mutations\n", mutations);
    }
    return 0;
}
