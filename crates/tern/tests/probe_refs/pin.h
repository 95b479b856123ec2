/* Pins the calling thread to `cpu` (a negative number: leaves it where it
 * is), for the round trips whose two ends run on different CPUs. The file
 * including this defines _GNU_SOURCE before its first include. */
#include <sched.h>

static int pin_to(int cpu) {
    if (cpu < 0)
        return 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set);
}
