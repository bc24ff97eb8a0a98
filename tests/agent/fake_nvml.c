/* A fake libnvidia-ml.so.1 for tests: the NVML calls gpulease's agent makes, over two fixed
 * devices. Built by tests/agent/test_agent_nvml.py with gcc into a temp dir and found by pynvml's
 * dlopen("libnvidia-ml.so.1") through LD_LIBRARY_PATH.
 *
 * Device 0 supports everything; device 1 answers NOT_SUPPORTED for power, power limit and ECC
 * and has two XID critical-error events pending (delivered once). FAKE_NVML_INIT=driver makes
 * nvmlInitWithFlags fail with DRIVER_NOT_LOADED. It proves the agent's NVML code: the symbols
 * and signatures pynvml calls, the unit conversions, NOT_SUPPORTED as null, the XID drain and
 * a failed init; not that a real driver answers the same (benchmarks/gpu_check.sh does). */
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
enum { OK = 0, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, DRIVER_NOT_LOADED = 9, TIMEOUT = 10 };

typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct fake_device {
    const char *name, *uuid;
    unsigned int util, power_mw, limit_mw, temp, sm_mhz;
    unsigned long long mem_total, mem_used, reasons, ecc_corrected;
    int full;  /* 0: power, limit and ECC are NOT_SUPPORTED */
} fake_device;
typedef fake_device *nvmlDevice_t;
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;
typedef struct { int registered[2]; } fake_set;
typedef fake_set *nvmlEventSet_t;

static fake_device devices[2] = {
    {"Fake NVML T4", "GPU-fake-nvml-0", 42, 35000, 70000, 61, 1590,
     16000000000ULL, 4000000000ULL, 0x20 | 0x1, 3, 1},
    {"Fake NVML T4", "GPU-fake-nvml-1", 7, 0, 0, 40, 300,
     16000000000ULL, 1000000000ULL, 0, 0, 0},
};
static int pending_xids = 2; /* on device 1 */

static int valid(nvmlDevice_t d) { return d == &devices[0] || d == &devices[1]; }

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    const char *mode = getenv("FAKE_NVML_INIT");
    (void)flags;
    return mode && strcmp(mode, "driver") == 0 ? DRIVER_NOT_LOADED : OK;
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlShutdown(void) { return OK; }

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case OK: return "Success";
    case INVALID_ARGUMENT: return "Invalid Argument";
    case NOT_SUPPORTED: return "Not Supported";
    case DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case TIMEOUT: return "Timeout";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) { *count = 2; return OK; }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (index > 1) return INVALID_ARGUMENT;
    *device = &devices[index];
    return OK;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index) {
    if (!valid(d)) return INVALID_ARGUMENT;
    *index = (unsigned int)(d - devices);
    return OK;
}

static nvmlReturn_t copy(const char *text, char *out, unsigned int length) {
    if (strlen(text) + 1 > length) return INVALID_ARGUMENT;
    strcpy(out, text);
    return OK;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
    return valid(d) ? copy(d->name, name, length) : INVALID_ARGUMENT;
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    return valid(d) ? copy(d->uuid, uuid, length) : INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
    if (!valid(d)) return INVALID_ARGUMENT;
    u->gpu = d->util;
    u->memory = d->util / 2;
    return OK;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    if (!valid(d)) return INVALID_ARGUMENT;
    m->total = d->mem_total;
    m->used = d->mem_used;
    m->free = d->mem_total - d->mem_used;
    return OK;
}
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) {
    if (!valid(d)) return INVALID_ARGUMENT;
    if (!d->full) return NOT_SUPPORTED;
    *mw = d->power_mw;
    return OK;
}
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *mw) {
    if (!valid(d)) return INVALID_ARGUMENT;
    if (!d->full) return NOT_SUPPORTED;
    *mw = d->limit_mw;
    return OK;
}
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *c) {
    if (!valid(d) || sensor != 0) return INVALID_ARGUMENT;
    *c = d->temp;
    return OK;
}
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz) {
    if (!valid(d) || type != 1) return INVALID_ARGUMENT; /* NVML_CLOCK_SM only */
    *mhz = d->sm_mhz;
    return OK;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *r) {
    if (!valid(d)) return INVALID_ARGUMENT;
    *r = d->reasons;
    return OK;
}
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int kind, int counter,
                                         unsigned long long *count) {
    if (!valid(d) || counter != 0) return INVALID_ARGUMENT; /* NVML_VOLATILE_ECC only */
    if (!d->full) return NOT_SUPPORTED;
    *count = kind == 0 ? d->ecc_corrected : 0;
    return OK;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    *set = calloc(1, sizeof(fake_set));
    return *set ? OK : INVALID_ARGUMENT;
}
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) { free(set); return OK; }
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types,
                                      nvmlEventSet_t set) {
    if (!valid(d) || !set) return INVALID_ARGUMENT;
    if (!(types & 0x8)) return NOT_SUPPORTED; /* XID critical errors only */
    set->registered[d - devices] = 1;
    return OK;
}
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int ms) {
    (void)ms; /* never blocks: the agent asks with 0 */
    if (!set || !set->registered[1] || pending_xids == 0) return TIMEOUT;
    pending_xids--;
    memset(data, 0, sizeof(*data));
    data->device = &devices[1];
    data->eventType = 0x8;
    data->eventData = 79; /* "GPU has fallen off the bus" */
    return OK;
}
