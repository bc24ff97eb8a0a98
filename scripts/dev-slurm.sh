#!/usr/bin/env bash
# A single-machine Slurm cluster for development and tests, without systemd.
#
#   eval "$(scripts/dev-slurm.sh start)"   # installs slurm-wlm + munge if missing, starts
#                                          # munged, slurmctld, slurmd; prints `export SLURM_CONF=`
#   scripts/dev-slurm.sh status            # the daemons' pids and, when slurmctld runs, `sinfo`
#   scripts/dev-slurm.sh stop              # cancels the cluster's jobs, kills the daemons by
#                                          # their recorded pids and checks that they are gone
#   eval "$(scripts/dev-slurm.sh start --rest)"  # (or GPULEASE_SLURM_REST=1) also JWT auth and
#                                          # slurmrestd on 127.0.0.1:$GPULEASE_SLURM_REST_PORT;
#                                          # prints SLURM_REST_URL and a SLURM_JWT line too
#
# State lives in ${GPULEASE_SLURM_DIR:-/tmp/gpulease-slurm}: munge key and socket, slurm.conf,
# gres.conf, fake GPU device files (nvidia0..3, made with mknod), spool, state, pids and logs.
# Only `export SLURM_CONF=...` goes to stdout; progress goes to stderr. Needs root (mknod,
# SlurmUser=root, apt-get). Settings: see docs/slurm.md. Two clusters run side by side when they
# have different GPULEASE_SLURM_DIRs and ports (the test suite starts one per session that way).
set -euo pipefail

DIR="${GPULEASE_SLURM_DIR:-/tmp/gpulease-slurm}"
NODES="${GPULEASE_SLURM_NODES:-3}"     # slurmd daemons (virtual nodes) on this machine
GPUS="${GPULEASE_SLURM_GPUS:-4}"       # fake GPUs per node
CONF="$DIR/etc/slurm.conf"
HOST="$(hostname -s)"
REST="${GPULEASE_SLURM_REST:-0}"        # 1: JWT auth + slurmrestd (also `start --rest`)
CTLD_PORT="${GPULEASE_SLURM_PORT:-16817}"
SLURMD_PORT="${GPULEASE_SLURMD_PORT:-16818}"  # the first node's; node i: +i, unless
SLURMD_PORTS="${GPULEASE_SLURMD_PORTS:-}"     # a comma list, one port per node
FIRST_JOB_ID="${GPULEASE_SLURM_FIRST_JOB_ID:-}"  # FirstJobId (unset: Slurm's default, 1)
REST_PORT="${GPULEASE_SLURM_REST_PORT:-16880}"
REST_USER="${GPULEASE_SLURM_REST_USER:-slurmrest}"  # slurmrestd refuses to run as root

log() { echo "dev-slurm: $*" >&2; }

alive() { # alive PIDFILE: true when the pid it records runs the daemon the file is named for
    local pid comm want
    [[ -s "$1" ]] || return 1
    pid="$(cat "$1")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    comm="$(cat "/proc/$pid/comm" 2>/dev/null)" || return 1
    want="$(basename "$1" .pid)"
    want="${want%%-*}"  # slurmd-NODE.pid: slurmd
    [[ "$comm" == "$want" ]]
}

node_port() { # node_port INDEX: that node's slurmd port
    local ports
    if [[ -n "$SLURMD_PORTS" ]]; then
        IFS=, read -r -a ports <<<"$SLURMD_PORTS"
        (( ${#ports[@]} == NODES )) \
            || { log "GPULEASE_SLURMD_PORTS names ${#ports[@]} port(s) for $NODES node(s)"; exit 2; }
        echo "${ports[$1]}"
    else
        echo $((SLURMD_PORT + $1))
    fi
}

install_packages() {
    local want=(slurm-wlm munge)
    [[ "$REST" == 1 ]] && want+=(slurmrestd slurm-wlm-jwt-plugin)
    if command -v slurmctld >/dev/null && command -v munged >/dev/null \
        && { [[ "$REST" != 1 ]] || command -v slurmrestd >/dev/null; }; then
        return 0
    fi
    [[ "$(id -u)" == 0 ]] || { log "not root: cannot install ${want[*]}"; exit 2; }
    log "installing ${want[*]} (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 \
        "${want[@]}" >&2 || {
        apt-get update -qq -o DPkg::Lock::Timeout=300 >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 \
            "${want[@]}" >&2
    }
}

node_name() { # node_name INDEX: the first node is this host, the others HOST-N
    if [[ "$1" == 0 ]]; then echo "$HOST"; else echo "$HOST-$1"; fi
}

write_configs() {
    local cpus i name last
    cpus="$(nproc)"
    (( cpus < 16 )) && cpus=16  # config_overrides: jobs are agents, mostly idle
    last=$((GPUS - 1))
    mkdir -p "$DIR"/{etc,spool,state,run,log,dev,munge}
    chmod 755 "$DIR" "$DIR/etc"  # slurmrestd, as $REST_USER, reads slurm.conf (mktemp -d: 0700)
    for ((i = 0; i < NODES; i++)); do
        mkdir -p "$DIR/spool/$(node_name "$i")"
    done
    for ((i = 0; i < GPUS; i++)); do
        [[ -e "$DIR/dev/nvidia$i" ]] || mknod "$DIR/dev/nvidia$i" c 195 "$i"
    done
    {
        echo "ClusterName=gpulease-dev"
        echo "SlurmctldHost=$HOST(127.0.0.1)"
        echo "SlurmUser=root"
        echo "SlurmctldPort=$CTLD_PORT"
        echo "AuthType=auth/munge"
        echo "AuthInfo=socket=$DIR/munge/munge.socket"
        if [[ "$REST" == 1 ]]; then
            echo "AuthAltTypes=auth/jwt"
            echo "AuthAltParameters=jwt_key=$DIR/jwt.key"
        fi
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_Core"
        echo "GresTypes=gpu"
        echo "AccountingStorageType=accounting_storage/none"
        echo "JobCompType=jobcomp/none"
        echo "JobRequeue=1"
        [[ -n "$FIRST_JOB_ID" ]] && echo "FirstJobId=$FIRST_JOB_ID"
        echo "PreemptType=preempt/partition_prio"
        echo "PreemptMode=REQUEUE"
        echo "SlurmdParameters=config_overrides"
        echo "ReturnToService=2"
        echo "MinJobAge=300"
        echo "KillWait=2"
        echo "SlurmdSpoolDir=$DIR/spool/%n"
        echo "StateSaveLocation=$DIR/state"
        echo "SlurmctldPidFile=$DIR/run/slurmctld.pid"
        echo "SlurmdPidFile=$DIR/run/slurmd-%n.pid"
        echo "SlurmctldLogFile=$DIR/log/slurmctld.log"
        echo "SlurmdLogFile=$DIR/log/slurmd-%n.log"
        echo "SlurmdPort=$(node_port 0)"
        for ((i = 0; i < NODES; i++)); do
            name="$(node_name "$i")"
            echo "NodeName=$name NodeHostname=$HOST NodeAddr=127.0.0.1" \
                "Port=$(node_port "$i")" \
                "CPUs=$cpus RealMemory=1000 Gres=gpu:$GPUS State=UNKNOWN"
        done
        echo "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE DefaultTime=60 State=UP"
    } >"$CONF"
    {
        echo "AutoDetect=off"
        for ((i = 0; i < NODES; i++)); do
            echo "NodeName=$(node_name "$i") Name=gpu File=$DIR/dev/nvidia[0-$last]"
        done
    } >"$DIR/etc/gres.conf"
}

start_munge() {
    if alive "$DIR/munge/munged.pid"; then
        return 0
    fi
    if [[ ! -s "$DIR/munge/munge.key" ]]; then
        dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    fi
    chmod 755 "$DIR/munge"
    chmod 400 "$DIR/munge/munge.key"
    munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
        --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" \
        --seed-file="$DIR/munge/munged.seed" >&2
}

make_jwt_key() { # the HS256 key slurmctld signs and checks tokens with (root only)
    if [[ ! -s "$DIR/jwt.key" ]]; then
        dd if=/dev/urandom of="$DIR/jwt.key" bs=32 count=1 status=none
    fi
    chown root:root "$DIR/jwt.key"
    chmod 0600 "$DIR/jwt.key"
}

start_rest() { # slurmrestd as $REST_USER (it refuses root), JWT auth only, openapi v0.0.38
    local i pid
    if ! id "$REST_USER" >/dev/null 2>&1; then
        log "creating system user $REST_USER"
        useradd --system --no-create-home --shell /usr/sbin/nologin "$REST_USER"
    fi
    if alive "$DIR/run/slurmrestd.pid"; then
        return 0
    fi
    log "starting slurmrestd on 127.0.0.1:$REST_PORT as $REST_USER"
    # SLURM_JWT=daemon: slurmrestd talks to slurmctld with auth/jwt (each client's token)
    # instead of its own munge identity; setpriv execs, so $! is slurmrestd itself
    env SLURM_JWT=daemon SLURM_CONF="$CONF" setpriv --reuid="$REST_USER" --regid="$REST_USER" \
        --clear-groups slurmrestd -f "$CONF" -a rest_auth/jwt -s openapi/v0.0.38 \
        "127.0.0.1:$REST_PORT" </dev/null >>"$DIR/log/slurmrestd.log" 2>&1 &
    pid="$!"
    echo "$pid" >"$DIR/run/slurmrestd.pid"
    for ((i = 0; i < 300; i++)); do  # 30 s: a loaded 2-core machine can take several
        if (echo >"/dev/tcp/127.0.0.1/$REST_PORT") 2>/dev/null; then
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || break  # (not `alive`: env and setpriv exec on the way)
        sleep 0.1
    done
    log "slurmrestd did not come up; see $DIR/log/slurmrestd.log:"
    tail -n 20 "$DIR/log/slurmrestd.log" >&2 || true
    exit 1
}

print_env() {
    echo "export SLURM_CONF=$CONF"
    if [[ "$REST" == 1 ]]; then
        echo "export SLURM_REST_URL=http://127.0.0.1:$REST_PORT"
        # the token is made when this line runs, never printed by this script
        echo "export SLURM_JWT=\$(scontrol token username=root lifespan=3600 | cut -d= -f2)"
    fi
}

start_slurm() {
    local i name
    export SLURM_CONF="$CONF"
    if ! alive "$DIR/run/slurmctld.pid"; then
        log "starting slurmctld"
        slurmctld -f "$CONF" -i >&2
    fi
    for ((i = 0; i < NODES; i++)); do
        name="$(node_name "$i")"
        if ! alive "$DIR/run/slurmd-$name.pid"; then
            log "starting slurmd for $name"
            slurmd -f "$CONF" -N "$name" >&2
        fi
    done
}

wait_idle() { # until every node is idle (or mixed/allocated: busy is up too), 30 s at most
    local out deadline=$((SECONDS + 30))
    while ((SECONDS < deadline)); do
        out="$(SLURM_CONF="$CONF" timeout 5 sinfo -h -N -o '%T' 2>/dev/null || true)"
        if [[ -n "$out" ]] && ! grep -qvE '^(idle|mixed|allocated)$' <<<"$out"; then
            return 0
        fi
        sleep 0.2
    done
    log "the nodes did not come up idle; sinfo says:"
    SLURM_CONF="$CONF" timeout 5 sinfo -N >&2 || true
    log "see $DIR/log"
    exit 1
}

all_up() {
    local i
    alive "$DIR/munge/munged.pid" && alive "$DIR/run/slurmctld.pid" || return 1
    if [[ "$REST" == 1 ]]; then
        alive "$DIR/run/slurmrestd.pid" && grep -q '^AuthAltTypes=auth/jwt' "$CONF" || return 1
    fi
    for ((i = 0; i < NODES; i++)); do
        alive "$DIR/run/slurmd-$(node_name "$i").pid" || return 1
    done
}

cmd_start() {
    if [[ -f "$CONF" ]] && all_up; then
        print_env
        return 0
    fi
    if [[ "$REST" == 1 ]] && alive "$DIR/run/slurmctld.pid" \
        && ! grep -q '^AuthAltTypes=auth/jwt' "$CONF"; then
        log "a cluster without JWT auth runs in $DIR; stop it or use another GPULEASE_SLURM_DIR"
        exit 1
    fi
    install_packages
    write_configs
    [[ "$REST" == 1 ]] && make_jwt_key
    start_munge
    start_slurm
    wait_idle
    [[ "$REST" == 1 ]] && start_rest
    log "up: $NODES node(s) x $GPUS fake GPUs, partition gpu"
    print_env
}

cancel_jobs() { # scancel every job of this cluster and wait (15 s at most) until none is active
    local i jobs
    alive "$DIR/run/slurmctld.pid" || return 0
    export SLURM_CONF="$CONF"
    for ((i = 0; i < 75; i++)); do
        jobs="$(timeout 5 squeue -h -o %i 2>/dev/null)" || return 0
        [[ -z "$jobs" ]] && return 0
        # shellcheck disable=SC2086 # one job id a word
        (( i % 10 == 0 )) && { log "cancelling job(s) $(echo $jobs)"; timeout 5 scancel $jobs || true; }
        sleep 0.2
    done
    log "jobs still active after scancel: $jobs"
}

stop_daemons() { # stop_daemons PIDFILE...: SIGTERM them all, 5 s grace, SIGKILL, then check
    local f pid i pids=() left=()
    for f in "$@"; do
        if alive "$f"; then
            pid="$(cat "$f")"
            log "stopping $(basename "$f" .pid) ($pid)"
            kill "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
    done
    for ((i = 0; i < 50 && ${#pids[@]}; i++)); do
        kill -0 "${pids[@]}" 2>/dev/null || break  # true while any of them runs
        sleep 0.1
    done
    for f in "$@"; do
        if alive "$f"; then
            kill -9 "$(cat "$f")" 2>/dev/null || true
            sleep 0.2
            if alive "$f"; then left+=("$(basename "$f" .pid) ($(cat "$f"))"); fi
        fi
        [[ -e "$f" ]] && ! alive "$f" && rm -f "$f"
    done
    if (( ${#left[@]} )); then
        log "still running: ${left[*]}"
        exit 1
    fi
}

cmd_stop() {
    cancel_jobs
    stop_daemons "$DIR/run/slurmrestd.pid" "$DIR"/run/slurmd-*.pid "$DIR/run/slurmctld.pid"
    stop_daemons "$DIR/munge/munged.pid"  # last: the others authenticate through it
}

cmd_status() {
    local f
    for f in "$DIR"/run/*.pid "$DIR/munge/munged.pid"; do
        [[ -e "$f" ]] || continue
        if alive "$f"; then echo "$(basename "$f" .pid): running ($(cat "$f"))"
        else echo "$(basename "$f" .pid): not running"; fi
    done
    if alive "$DIR/run/slurmctld.pid"; then
        SLURM_CONF="$CONF" timeout 10 sinfo -N 2>&1 || true
    else
        echo "no slurmctld runs for $DIR"
    fi
}

case "${1:-}" in
    start)
        [[ "${2:-}" == --rest ]] && REST=1
        cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *) echo "usage: $0 start [--rest]|stop|status" >&2; exit 2 ;;
esac
