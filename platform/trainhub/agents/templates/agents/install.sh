{% autoescape off %}#!/bin/sh
# TrainHub node agent installer, served by {{ server }} (trainhub-runtime {{ version }}).
#
#   curl -fsSL {{ server }}/agent/install.sh | sh -s -- --server {{ server }} --token-file FILE
#
# Installs the trainhub-runtime distribution (the PS runtime and the node agent; no
# Django) into a virtualenv at --prefix, enrolls this machine with the enrollment token
# and, run as root, installs and starts the systemd unit trainhub-agent.service.
#
# The token comes from a file or standard input (--token-file) and goes to the agent on
# its standard input: no command line holds it, where other users could read it in the
# process list (--token still works, with a warning). The agent's wheel is checked against
# the sha256 below, which the server computed from the wheel it serves: a wheel changed on
# the way or on the server is not installed. A plain-http server is refused without
# --insecure.
#
# Running it again upgrades the agent in place: the virtualenv is kept and the runtime
# reinstalled; a node already enrolled (PREFIX/etc/agent.json exists) is not enrolled
# again and needs no token; a running service is restarted onto the new version, and its
# tasks keep running (the unit stops only the agent's own process; the new agent adopts
# the tasks from its task table).
#
# Everything runs from `main "$@"` on the last line: a download cut short runs nothing.
set -eu

SERVER={{ server_q }}
WHEEL={{ wheel_q }}
WHEEL_SHA256={{ wheel_sha256_q }}
DIST_PATH={{ dist_path_q }}
PREFIX=/opt/trainhub-agent
TOKEN=
TOKEN_FILE=
INSECURE=0
NAME=
LABELS=
ADDRESS=
INDEX_URL=
SERVICE=1
UNIT=trainhub-agent.service
# Where /etc/systemd and /run/systemd are looked for under (tests); empty on a real node.
SYSTEMD_ROOT=${TRAINHUB_SYSTEMD_ROOT:-}

say() { printf 'trainhub-agent install: %s\n' "$*"; }
warn() { printf 'trainhub-agent install: warning: %s\n' "$*" >&2; }
die() {
    printf 'trainhub-agent install: error: %s\n' "$*" >&2
    exit 1
}

usage() {
    cat <<'EOF'
Install the TrainHub node agent and enroll this machine.

usage: sh install.sh --server URL --token-file PATH [options]

  --server URL       the TrainHub server's https:// URL (default: the one this script
                     came from)
  --token-file PATH  read the enrollment token (POST /api/v1/enrollment-tokens/) from
                     PATH, or from standard input with --token-file - (then run a saved
                     copy of this script: sh install.sh ... --token-file - < FILE);
                     not needed when this machine is already enrolled (an upgrade)
  --token TOKEN      the token itself: works, but it is visible to other users in the
                     process list, and it stays in your shell history
  --insecure         allow an http:// server: the token, the node's credential and the
                     agent software then cross the network unencrypted (test setups)
  --prefix DIR       where the agent is installed (default /opt/trainhub-agent)
  --no-service       no systemd unit: print the command that runs the agent instead
  --name NAME        the node's name (default: this host's name)
  --labels k=v,...   labels of the node, e.g. zone=eu-1,rack=4
  --address ADDR     the address other nodes reach this one on (default: the one this
                     machine reaches the server from)
  --index-url URL    package index for the agent's dependencies (passed to pip)
  -h, --help         this text

Environment: TRAINHUB_PYTHON, the Python (3.11 or newer) to build the agent on.
EOF
}

parse_args() {
    while [ $# -gt 0 ]; do
        opt=$1
        val=
        case $opt in
            --*=*)
                val=${opt#*=}
                opt=${opt%%=*}
                shift
                ;;
            --server | --token | --token-file | --prefix | --name | --labels | --address | --index-url)
                [ $# -ge 2 ] || die "$opt needs a value (see --help)"
                val=$2
                shift 2
                ;;
            *) shift ;;
        esac
        case $opt in
            --server) SERVER=$val ;;
            --token) TOKEN=$val ;;
            --token-file) TOKEN_FILE=$val ;;
            --insecure) INSECURE=1 ;;
            --prefix) PREFIX=$val ;;
            --name) NAME=$val ;;
            --labels) LABELS=$val ;;
            --address) ADDRESS=$val ;;
            --index-url) INDEX_URL=$val ;;
            --no-service) SERVICE=0 ;;
            -h | --help)
                usage
                exit 0
                ;;
            *) die "unknown option: $opt (see --help)" ;;
        esac
    done
    case $SERVER in
        https://?*) ;;
        http://?*)
            [ "$INSECURE" = 1 ] || die "refusing the plain-http server $SERVER: the enrollment token, this node's credential and the agent software would cross the network unencrypted and unchecked, so anyone on the way could read or replace them. Use the server's https:// URL (its admin sets TRAINHUB_EXTERNAL_URL to it), or pass --insecure to accept plain http on a network you trust, such as a test setup."
            warn "--insecure: talking to $SERVER over plain http, unencrypted"
            ;;
        *) die "--server must be the server's https:// URL (http:// only with --insecure), got '$SERVER'" ;;
    esac
    SERVER=${SERVER%/}
    if [ -n "$TOKEN" ] && [ -n "$TOKEN_FILE" ]; then
        die "give the enrollment token once: --token-file or --token, not both"
    fi
    case $PREFIX in
        /*) ;;
        *) PREFIX=$(pwd)/$PREFIX ;;
    esac
    PREFIX=${PREFIX%/}
    case $PREFIX in
        "" | *[!A-Za-z0-9_./-]*) die "--prefix must be a path of letters, digits and . _ - / (got '$PREFIX')" ;;
    esac
    STATE=$PREFIX/etc/agent.json
    WORK_DIR=$PREFIX/work
    AGENT=$PREFIX/bin/trainhub-agent
    RUN_COMMAND="$AGENT run --state-file $STATE --work-dir $WORK_DIR"
    CONFIG=$PREFIX/etc/trainhub-agent.json
}

# The enrollment token, from --token-file (builtins only: no process has it in its
# arguments), or from --token with a warning.
read_token() {
    if [ -n "$TOKEN" ]; then
        warn "--token puts the enrollment token in the process list, where other users of this machine can read it until it is used, and in your shell history; pass --token-file PATH instead (or --token-file - with the token on standard input)"
        return
    fi
    [ -n "$TOKEN_FILE" ] || return 0
    if [ "$TOKEN_FILE" = - ]; then
        from="standard input"
        read -r TOKEN || true
    else
        from=$TOKEN_FILE
        if [ ! -f "$TOKEN_FILE" ] || [ ! -r "$TOKEN_FILE" ]; then
            die "cannot read the token file $TOKEN_FILE"
        fi
        read -r TOKEN <"$TOKEN_FILE" || true
    fi
    TOKEN=${TOKEN%"$(printf '\r')"}
    if [ -z "$TOKEN" ]; then
        die "no enrollment token on the first line of $from. With curl ... | sh, standard input is this script itself: save the token to a file and pass --token-file FILE."
    fi
}

python_ok() {
    "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' >/dev/null 2>&1 </dev/null
}

# Python 3.11 or newer, with the venv module: TRAINHUB_PYTHON, else the first on PATH.
find_python() {
    PYTHON=
    if [ -n "${TRAINHUB_PYTHON:-}" ]; then
        python_ok "$TRAINHUB_PYTHON" || die "TRAINHUB_PYTHON=$TRAINHUB_PYTHON is not a working Python 3.11 or newer"
        PYTHON=$TRAINHUB_PYTHON
    else
        for candidate in python3 python3.13 python3.12 python3.11; do
            if command -v "$candidate" >/dev/null 2>&1 && python_ok "$candidate"; then
                PYTHON=$(command -v "$candidate")
                break
            fi
        done
    fi
    if [ -z "$PYTHON" ]; then
        die "the agent needs Python 3.11 or newer, and none was found on PATH (python3, python3.13, python3.12, python3.11). Install one (Debian 12 / Ubuntu 24.04: apt-get install python3 python3-venv; Ubuntu 22.04: apt-get install python3.11 python3.11-venv; RHEL 9: dnf install python3.11) or set TRAINHUB_PYTHON to its path."
    fi
    if ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1 </dev/null; then
        die "$PYTHON has no venv module (with ensurepip); install it (Debian/Ubuntu: apt-get install python3-venv, or python3.11-venv for python3.11)"
    fi
}

# The virtualenv: created once, kept on upgrades.
# Every task runs in bubblewrap (the task sandbox); without it the agent starts none.
ensure_sandbox() {
    command -v bwrap >/dev/null 2>&1 && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing bubblewrap, the sandbox every task runs in"
        if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null 2>&1 &&
            ! { apt-get update -qq >/dev/null 2>&1 &&
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null 2>&1; }; then
            warn "could not install bubblewrap (apt-get install bubblewrap): the agent starts no task until it is installed"
        fi
    elif [ "$(id -u)" = 0 ] && command -v dnf >/dev/null 2>&1; then
        say "installing bubblewrap, the sandbox every task runs in"
        dnf install -y -q bubblewrap >/dev/null 2>&1 ||
            warn "could not install bubblewrap (dnf install bubblewrap): the agent starts no task until it is installed"
    else
        warn "bubblewrap is not installed: the agent starts no task until it is (Debian/Ubuntu: apt-get install bubblewrap; RHEL/Fedora: dnf install bubblewrap)"
    fi
}

make_venv() {
    UPGRADE=0
    if [ -x "$PREFIX/bin/python" ]; then
        python_ok "$PREFIX/bin/python" || die "$PREFIX holds a virtualenv whose Python no longer works; move $PREFIX away (keep $STATE to stay enrolled) and run this again"
        UPGRADE=1
        say "upgrading the agent in $PREFIX"
    else
        if ! mkdir -p "$PREFIX" 2>/dev/null || [ ! -w "$PREFIX" ]; then
            die "cannot write to $PREFIX: run as root (curl ... | sudo sh -s -- ...) or choose another --prefix"
        fi
        say "creating a virtualenv in $PREFIX with $PYTHON"
        "$PYTHON" -m venv "$PREFIX" </dev/null || die "could not create a virtualenv in $PREFIX with $PYTHON"
    fi
}

pip_install() {
    if [ -n "$INDEX_URL" ]; then
        set -- --index-url "$INDEX_URL" "$@"
    fi
    "$PREFIX/bin/python" -m pip install --disable-pip-version-check --no-input --quiet "$@" </dev/null
}

# The runtime wheel of the server's version, checked against the sha256 this script
# carries before anything is installed.
download_runtime() {
    url=$SERVER$DIST_PATH$WHEEL
    if command -v curl >/dev/null 2>&1; then
        curl -fsSL --retry 3 -o "$TMP/$WHEEL" "$url" || die "cannot download the agent from $url"
    else
        "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$url" "$TMP/$WHEEL" 2>"$TMP/err" </dev/null || die "cannot download the agent from $url: $(tail -n 1 "$TMP/err")"
    fi
    actual=$("$PYTHON" -c 'import hashlib, sys; print(hashlib.file_digest(open(sys.argv[1], "rb"), "sha256").hexdigest())' "$TMP/$WHEEL" </dev/null) || die "cannot compute the sha256 of $TMP/$WHEEL"
    if [ "$actual" != "$WHEEL_SHA256" ]; then
        die "the downloaded $WHEEL does not match the sha256 this script carries (got $actual, expected $WHEEL_SHA256): it was changed on the way or on the server, so nothing was installed. Fetch the script again and rerun it (the server rebuilds its wheel when its source changes); if it fails again, tell the server's admin."
    fi
}

# The checked wheel, then its dependencies from the index.
install_runtime() {
    say "installing $WHEEL and its dependencies (grpcio, protobuf, numpy, websockets)"
    pip_install --upgrade "$TMP/$WHEEL" || die "pip could not install the agent's dependencies; without access to the public package index, pass --index-url with a mirror"
    if [ "$UPGRADE" = 1 ]; then
        # Same version number, newer build (a server running from source): replace the files.
        pip_install --no-deps --force-reinstall "$TMP/$WHEEL" || die "pip could not reinstall $WHEEL"
    fi
    say "installed $("$AGENT" --version)"
}

# Enrollment: once; the node's credential goes to $STATE, mode 0600.
enroll() {
    if [ -f "$STATE" ]; then
        say "already enrolled ($STATE kept; no token used). To enroll this machine again: stop its agent, remove $STATE and run this with a new token."
        return
    fi
    set -- enroll --server "$SERVER" --token-file - --state-file "$STATE"
    if [ -n "$NAME" ]; then
        set -- "$@" --name="$NAME"
    fi
    if [ -n "$ADDRESS" ]; then
        set -- "$@" --address="$ADDRESS"
    fi
    if [ -n "$LABELS" ]; then
        set -- "$@" --labels="$LABELS"
    fi
    printf '%s\n' "$TOKEN" | "$AGENT" "$@" || die "enrollment failed (see above); the agent stays installed in $PREFIX: run this again with a new token"
}

# What `$AGENT run` (or enroll) without --state-file and --work-dir uses: the agent reads
# it from its virtualenv's etc/ (ps_runtime/agent/state.py).
write_config() {
    printf '{"state_file": "%s", "work_dir": "%s"}\n' "$STATE" "$WORK_DIR" >"$CONFIG.tmp"
    mv -f "$CONFIG.tmp" "$CONFIG"
}

run_yourself() {
    say "$1 Run the agent with:"
    printf '  %s\n' "$RUN_COMMAND"
}

# As root with systemd: the unit, enabled and started; a running agent is restarted onto
# the new version (its tasks go on: KillMode=process, and the new agent adopts them).
install_service() {
    unit_file=$SYSTEMD_ROOT/etc/systemd/system/$UNIT
    cat >"$TMP/$UNIT" <<UNIT
{% include "agents/trainhub-agent.service" %}UNIT
    if [ ! -f "$unit_file" ] || [ "$(cat "$TMP/$UNIT")" != "$(cat "$unit_file")" ]; then
        mkdir -p "${unit_file%/*}"
        install -m 0644 "$TMP/$UNIT" "$unit_file"
        systemctl daemon-reload
        say "wrote $unit_file"
    fi
    systemctl enable --quiet "$UNIT"
    if systemctl is-active --quiet "$UNIT"; then
        systemctl restart "$UNIT"
        say "restarted $UNIT on the new version; its tasks kept running and the agent adopted them."
    else
        systemctl start "$UNIT"
        say "started $UNIT (journalctl -u $UNIT shows its log)."
    fi
}

main() {
    parse_args "$@"
    if [ ! -f "$STATE" ]; then
        read_token
        [ -n "$TOKEN" ] || die "an enrollment token is needed to enroll this machine: ask a platform admin for one (POST /api/v1/enrollment-tokens/ answers with the whole command), save it to a file and pass --token-file FILE"
    elif [ -n "$TOKEN" ]; then
        read_token # only its warning: the token is not used
    fi
    find_python
    ensure_sandbox
    TMP=$(mktemp -d)
    trap 'rm -rf "$TMP"' EXIT
    trap 'exit 130' INT TERM
    download_runtime
    make_venv
    install_runtime
    mkdir -p "$PREFIX/etc"
    chmod 700 "$PREFIX/etc"
    enroll
    write_config
    mkdir -p "$WORK_DIR"
    if [ "$SERVICE" = 0 ]; then
        run_yourself "installed, no service (--no-service)."
    elif [ "$(id -u)" != 0 ]; then
        run_yourself "not root, so no systemd unit was installed."
    elif ! command -v systemctl >/dev/null 2>&1 || [ ! -d "$SYSTEMD_ROOT/run/systemd/system" ]; then
        run_yourself "systemd is not running here, so no unit was installed."
    else
        install_service
    fi
}

main "$@"
{% endautoescape %}
