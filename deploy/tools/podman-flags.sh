# Sourced by build-image.sh (and read by tests/image through `bash -c`): the podman flags this
# repository's image build and image tests pass on every machine. Defines two arrays:
#   QF_PODMAN_GLOBAL_FLAGS  before the subcommand: podman "${QF_PODMAN_GLOBAL_FLAGS[@]}" run ...
#   QF_PODMAN_RUN_FLAGS     for `podman run` and `podman build` (which runs the RUN steps)
#
# Everything else is Debian's podman default, which already suits a machine without systemd:
# rootful storage in /var/lib/containers/storage (overlay), cgroup manager cgroupfs, events to a
# file. What had to be set:
#
# OCI runtime. crun (Debian's default) refuses a hybrid cgroup layout (v1 controllers plus a
# cgroup2 mount at /sys/fs/cgroup/unified: "cgroups in hybrid mode not supported"); runc runs
# there. QF_OCI_RUNTIME overrides the choice.
#
# Resource limits. Rootful podman asks for RLIMIT_NOFILE and RLIMIT_NPROC of 1048576 in every
# container, and its conmon runs with RLIMIT_NPROC 32768. Where the caller lacks
# CAP_SYS_RESOURCE (a VM or container whose limits are below those), the runtime cannot raise
# them and every container fails with "setrlimit ... Operation not permitted". So the limits
# are explicit: open files up to the caller's hard limit (at most 65536), 4096 processes,
# plenty for one QueueFlow process and its threads.

if [[ -n "${QF_OCI_RUNTIME:-}" ]]; then
    qf_runtime="$QF_OCI_RUNTIME"
elif [[ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" == cgroup2fs ]]; then
    qf_runtime=crun
else
    qf_runtime=runc
fi

qf_nofile="$(ulimit -Hn)"
if [[ "$qf_nofile" == unlimited ]] || (( qf_nofile > 65536 )); then
    qf_nofile=65536
fi

QF_PODMAN_GLOBAL_FLAGS=(--runtime "$qf_runtime")
QF_PODMAN_RUN_FLAGS=(--ulimit "nofile=$qf_nofile:$qf_nofile" --ulimit "nproc=4096:4096")
unset qf_runtime qf_nofile
