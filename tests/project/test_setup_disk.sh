#!/usr/bin/env bash
# scripts/setup.sh on a disk too small for what it still has to install: it stops before it
# downloads anything, with a message that says how much it needs and how much there is, and
# creates nothing. (A full disk otherwise showed up minutes later as a linker error.)
# Usage: test_setup_disk.sh SOURCE_ROOT
set -euo pipefail
src="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/repo/scripts" "$tmp/bin"
cp "$src/scripts/setup.sh" "$src/scripts/requirements.txt" "$src/scripts/lerobot-requirements.txt" \
  "$src"/scripts/ros2-*-requirements.txt "$tmp/repo/scripts/"
# A df that reports $FAKE_AVAIL_KB available, in the POSIX format setup.sh asks for.
cat > "$tmp/bin/df" <<'EOF'
#!/bin/sh
echo "Filesystem 1024-blocks Used Available Capacity Mounted on"
echo "/dev/fake 100000000 99000000 $FAKE_AVAIL_KB 99% /"
EOF
chmod +x "$tmp/bin/df"

fail() { echo "FAIL: $*"; echo "--- setup.sh said:"; echo "$out"; exit 1; }

# 1 GB free, no environment yet: refused.
rc=0
out=$(cd "$tmp/repo" && PATH="$tmp/bin:$PATH" FAKE_AVAIL_KB=1048576 bash scripts/setup.sh 2>&1) || rc=$?
[ "$rc" = 1 ] || fail "exit status $rc, not 1"
echo "$out" | grep -q "needs about [0-9]* GB free in $tmp/repo" || fail "no 'needs about N GB free in DIR'"
echo "$out" | grep -q "only 1 GB are free" || fail "no 'only 1 GB are free'"
echo "$out" | grep -q "PI0_SKIP_DISK_CHECK=1" || fail "the way around it is not named"
[ ! -e "$tmp/repo/.venv" ] || fail ".venv was created"
[ ! -e "$tmp/repo/.lerobot-venv" ] || fail ".lerobot-venv was created"
for d in jazzy kilted; do [ ! -e "$tmp/repo/.ros-$d-venv" ] || fail ".ros-$d-venv was created"; done
echo "$out" | grep -q "installing Python packages" && fail "it started installing"

# Nothing left to install (every stamp current): no space is needed, so no refusal, and the
# environments are left as they are.
mkdir -p "$tmp/repo/.venv/bin"
ln -s "$(command -v python3)" "$tmp/repo/.venv/bin/python"
sha256sum "$tmp/repo/scripts/requirements.txt" | cut -d' ' -f1 > "$tmp/repo/.venv/.requirements.sha"
mkdir -p "$tmp/repo/.lerobot-venv"
cat "$tmp/repo/scripts/lerobot-requirements.txt" "$tmp/repo/scripts/requirements.txt" |
  sha256sum | cut -d' ' -f1 > "$tmp/repo/.lerobot-venv/.requirements.sha"
for d in jazzy kilted; do
  mkdir -p "$tmp/repo/.ros-$d-venv"
  sha256sum "$tmp/repo/scripts/ros2-$d-requirements.txt" | cut -d' ' -f1 > "$tmp/repo/.ros-$d-venv/.requirements.sha"
done
rc=0
out=$(cd "$tmp/repo" && PATH="$tmp/bin:$PATH" FAKE_AVAIL_KB=1048576 bash scripts/setup.sh 2>&1) || rc=$?
[ "$rc" = 0 ] || fail "exit status $rc with nothing to install"
echo "$out" | grep -q "needs about" && fail "refused with nothing to install"
echo "ok: refused on a small disk, silent when nothing is left to install"
