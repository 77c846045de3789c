/* libnvidia-ml.so.1 stand-in for the rigkit sandbox (issue 41; tests/harness/README.md "The fake GPU").

   Built by tests/harness/build_mirror.py (gcc -shared) and shipped by the fake nvidia-utils package at
   the path the real one uses (/usr/lib/libnvidia-ml.so.<driver version>, with the libnvidia-ml.so.1
   and libnvidia-ml.so links). It exports exactly what NVIDIA's binding nvidia-ml-py 13.615.71
   (pynvml.py) resolves by name for the calls rigkit makes, and nothing else:

     pynvml.nvmlInit()                            -> nvmlInitWithFlags(0)
     pynvml.nvmlDeviceGetHandleByIndex(i)         -> nvmlDeviceGetHandleByIndex_v2(i, &handle)
     pynvml.nvmlDeviceGetTotalEnergyConsumption(h) -> nvmlDeviceGetTotalEnergyConsumption(h, &mJ)
     pynvml.nvmlShutdown()                        -> nvmlShutdown()
     str(pynvml.NVMLError(code))                  -> nvmlErrorString(code), for a code pynvml has no words for

   (pynvml looks each up lazily, getattr on its CDLL, the first time it is called: a name missing here
   would raise NVMLError_FunctionNotFound at that call; tests/unit/test_nvml.py holds this list to
   pynvml's source.) Signatures and return codes: NVML API reference (nvml.h), "Initialization and
   Cleanup", "Device Queries", "Error reporting": nvmlReturn_t 0 success, 1 uninitialized, 2 invalid
   argument, 3 not supported, 9 driver not loaded, 18 driver/library (RM) version mismatch, 999 unknown.

   The model is not here: each answer comes from the fake GPU's one model, the fake nvidia-smi of the
   same package (tests/harness/stubs/nvidia-smi), run with RIGKIT_FAKE_NVML=<call> in its environment.
   Its exit status is the NVML code (nvidia-smi's exit codes are NVML's: 9 no driver loaded, 18 the
   mismatch); for "energy" its stdout is the counter in mJ since the driver loaded as of the moment this
   library was called (RIGKIT_FAKE_NVML_AT, unix s: the fake runs a process start later, and a real
   counter's value is the one at the call), or exit 3 on a board without one (board.json
   "energy_counter": false). $RIGKIT_FAKE_NVIDIA_SMI names another fake (unit tests). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
struct nvmlDevice_st { unsigned int index; };

enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_UNKNOWN = 999,
};

extern char **environ;

static struct nvmlDevice_st gpu0 = {0};
static int init_count; /* nvmlInit's reference count: each init needs its shutdown */

/* Run the fake nvidia-smi with RIGKIT_FAKE_NVML=call (and RIGKIT_FAKE_NVML_AT=at unless NULL), its
   stdout into out (at most n - 1 bytes, NUL ended); its exit status is the answer (NVML_ERROR_UNKNOWN
   when it could not run or was killed). */
static nvmlReturn_t ask(const char *call, const char *at, char *out, size_t n) {
    const char *smi = getenv("RIGKIT_FAKE_NVIDIA_SMI");
    if (!smi || !*smi)
        smi = "/usr/bin/nvidia-smi";
    size_t count = 0;
    while (environ[count])
        count++;
    char **env = calloc(count + 3, sizeof *env);
    if (!env)
        return NVML_ERROR_UNKNOWN;
    size_t k = 0;
    for (size_t i = 0; i < count; i++)
        if (strncmp(environ[i], "RIGKIT_FAKE_NVML", 16) != 0)
            env[k++] = environ[i];
    char var[64], when[64];
    snprintf(var, sizeof var, "RIGKIT_FAKE_NVML=%s", call);
    env[k++] = var;
    if (at) {
        snprintf(when, sizeof when, "RIGKIT_FAKE_NVML_AT=%s", at);
        env[k++] = when;
    }
    env[k] = NULL;

    nvmlReturn_t ret = NVML_ERROR_UNKNOWN;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        free(env);
        return ret;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    char *argv[] = {(char *)smi, NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, smi, &fa, NULL, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    close(fds[1]);
    size_t got = 0;
    if (rc == 0) {
        for (;;) {
            char buf[256];
            ssize_t r = read(fds[0], buf, sizeof buf);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            for (ssize_t i = 0; i < r && got + 1 < n; i++)
                out[got++] = buf[i];
        }
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        if (WIFEXITED(status))
            ret = WEXITSTATUS(status);
    }
    close(fds[0]);
    if (n)
        out[got] = '\0';
    return ret;
}

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    char buf[512];
    nvmlReturn_t ret = ask("init", NULL, buf, sizeof buf);
    if (ret == NVML_SUCCESS)
        __atomic_add_fetch(&init_count, 1, __ATOMIC_SEQ_CST);
    return ret;
}

EXPORT nvmlReturn_t nvmlShutdown(void) {
    int now = __atomic_load_n(&init_count, __ATOMIC_SEQ_CST);
    if (now <= 0)
        return NVML_ERROR_UNINITIALIZED;
    __atomic_sub_fetch(&init_count, 1, __ATOMIC_SEQ_CST);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (__atomic_load_n(&init_count, __ATOMIC_SEQ_CST) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!device || index != 0) /* one GPU: an index past the count is an invalid argument */
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpu0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy) {
    if (__atomic_load_n(&init_count, __ATOMIC_SEQ_CST) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (device != &gpu0 || !energy)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec now;
    char at[32], buf[64];
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(at, sizeof at, "%lld.%09ld", (long long)now.tv_sec, now.tv_nsec);
    nvmlReturn_t ret = ask("energy", at, buf, sizeof buf);
    if (ret != NVML_SUCCESS)
        return ret;
    char *end;
    errno = 0;
    unsigned long long mj = strtoull(buf, &end, 10);
    if (errno || end == buf || (*end && *end != '\n'))
        return NVML_ERROR_UNKNOWN;
    *energy = mj;
    return NVML_SUCCESS;
}

/* The words NVML gives each code (nvml.h's nvmlReturn_t, as pynvml's NVMLError._errcode_to_string
   repeats them). */
EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt Request Issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 20: return "Insufficient Memory";
    default: return "Unknown Error";
    }
}
