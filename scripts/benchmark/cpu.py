"""CPU time of processes, user + system, every thread counted: of another
process from /proc/<pid>/stat (clock ticks), of this one from getrusage."""
import os
import resource

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def stat_fields(pid):
    """The fields of /proc/<pid>/stat after the command name (which may hold
    spaces): [0] is the state (field 3), [1] the parent's pid."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return stat[stat.rindex(")") + 2:].split()


def cpu_seconds(pid):
    """utime + stime of process pid so far, in seconds (fields 14 and 15)."""
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def own_cpu_seconds():
    """This process's CPU time so far, every thread (microsecond resolution)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def children_cpu_seconds():
    """CPU time of this process's children: those it has waited for
    (getrusage) plus those alive now (/proc). The difference of two readings
    is what they used in between, whether or not they exited meanwhile."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = r.ru_utime + r.ru_stime
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = stat_fields(entry)
        except (OSError, ValueError):
            continue  # exited meanwhile
        if fields[1] == me:
            total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return total
