#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Rehearses the policy server image (Containerfile) without a container engine, the way
# scripts/gpu-rehearse.sh rehearses the GPU check: a bare Debian 12 root (debootstrap
# --variant=minbase) for each stage. The build stage runs `serve-image.sh build` on the
# repository's committed files (what the Containerfile's COPY takes); the runtime stage is a
# second bare root with only /opt/gst-pi0 copied over and `serve-image.sh runtime` run in it.
# Then pi0-serve (builtin:pi0-tiny) runs inside the runtime root as nobody, and the real
# openpi-client (.venv) asks it three times from outside (tests/serve/openpi_clients.py one):
# passes only if every answer holds. Not part of .ci/run: it downloads Debian and torch and
# builds gst-pi0 (docs/serve.md has its run time).
#
# usage: sudo scripts/serve-image-rehearse.sh
# env:   REHEARSE_FRESH=1  debootstrap the base root again (else reused from .serve-image/base)
#        REHEARSE_JOBS=N   build jobs (default 2)
#        REHEARSE_PORT=N   the port pi0-serve listens on, on 127.0.0.1 (default 18765)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
work=$src/.serve-image
jobs=${REHEARSE_JOBS:-2}
port=${REHEARSE_PORT:-18765}
start=$SECONDS
say() { printf '== [serve-image %3d min] %s\n' $(( (SECONDS - start) / 60 )) "$*"; }

[ "$(id -u)" = 0 ] || { echo "serve-image-rehearse.sh: run as root (debootstrap, chroot)" >&2; exit 2; }
[ -x "$src/.venv/bin/python" ] || { echo "no .venv with openpi-client: run scripts/setup.sh" >&2; exit 2; }
command -v debootstrap >/dev/null || apt-get install -y -qq --no-install-recommends debootstrap

mounted=()
cleanup() {
  [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
mount_into() { # ROOT: /proc, /dev, /sys as a container has them
  for d in proc dev sys; do
    mkdir -p "$1/$d"
    mount --rbind "/$d" "$1/$d"
    mounted+=("$1/$d")
  done
  cp /etc/resolv.conf "$1/etc/resolv.conf"
  # This machine's network may pass TLS through a proxy with its own CA (as a container build
  # here would need it too): its local CAs go into the root's trust store, which
  # ca-certificates builds when serve-image.sh installs it, and pip is pointed at that store.
  if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
    mkdir -p "$1/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$1/usr/local/share/ca-certificates/"
  fi
}
# A stage's commands, in a clean environment as a container build has it.
in_root() { # ROOT COMMAND...
  local root=$1
  shift
  chroot "$root" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 PIP_CERT=/etc/ssl/certs/ca-certificates.crt JOBS="$jobs" "$@"
}

mkdir -p "$work"
if [ -n "${REHEARSE_FRESH:-}" ] || [ ! -x "$work/base/bin/bash" ]; then
  say "debootstrap a bare Debian 12 root (minbase)"
  rm -rf "$work/base"
  debootstrap --variant=minbase bookworm "$work/base" http://deb.debian.org/debian >/dev/null
fi

say "build stage: a copy of the bare root, the committed tree at /src"
rm -rf "$work/build-root" "$work/runtime-root"
cp -a "$work/base" "$work/build-root"
mkdir -p "$work/build-root/src"
git -C "$src" archive HEAD | tar -x -C "$work/build-root/src"
mount_into "$work/build-root"
in_root "$work/build-root" bash /src/scripts/serve-image.sh build /src /opt/gst-pi0
say "build stage done: /opt/gst-pi0 is $(du -sh "$work/build-root/opt/gst-pi0" | cut -f1)"

say "runtime stage: another copy of the bare root, /opt/gst-pi0 only"
cp -a "$work/base" "$work/runtime-root"
cp -a "$work/build-root/opt/gst-pi0" "$work/runtime-root/opt/"
mount_into "$work/runtime-root"
in_root "$work/runtime-root" bash /opt/gst-pi0/share/gst-pi0/serve-image.sh runtime /opt/gst-pi0
[ ! -e "$work/runtime-root/usr/bin/gcc" ] || { echo "FAIL: the runtime root has a compiler"; exit 1; }

say "pi0-serve in the runtime root as nobody, openpi-client outside"
log=$work/serve.log
chroot --userspec=65534:65534 "$work/runtime-root" env -i HOME=/tmp \
  /opt/gst-pi0/bin/pi0-serve --model builtin:pi0-tiny --port "$port" >"$log" 2>&1 &
server_pid=$!
for _ in $(seq 1 600); do
  grep -q "serving builtin:pi0-tiny" "$log" && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$log"; echo "FAIL: pi0-serve exited"; exit 1; }
  sleep 0.1
done
grep -q "serving builtin:pi0-tiny" "$log" || { cat "$log"; echo "FAIL: pi0-serve did not start"; exit 1; }
"$src/.venv/bin/python" "$src/tests/serve/openpi_clients.py" one --port "$port" --requests 3
kill -TERM "$server_pid"
wait "$server_pid" || { cat "$log"; echo "FAIL: pi0-serve did not drain and exit 0"; exit 1; }
server_pid=
cat "$log"
say "PASS: the image's pi0-serve served openpi-client (openpi_clients.py one) and drained"
