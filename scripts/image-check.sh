#!/usr/bin/env bash
# Builds the daemon's image with make image (buildah) and runs it, offline.
# The base images the Dockerfile names cannot be pulled where no container
# registry is reachable, so this check makes stand-ins under the same names:
# for the build stage, this machine's Go (which must be the go.mod version)
# with a shell; for the run stage, this machine's glibc and the PATH and
# users of a distroless image. They live in a container store of this
# check's own, removed at the end, so a stand-in is never taken for the real
# image by a later build. Then it checks that the image runs as the
# Kubernetes manifest's runAsUser:runAsGroup, that its entry point is the
# daemon, that the daemon reports the version make build would stamp (git
# describe), and that it serves in the image as that user (socket 0660,
# healthcheck by the name the probes use) and removes its socket and rings
# on SIGTERM. What it cannot check: the real base images.
# Needs root and buildah (Debian's package). make image-check runs it.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
[ "$(id -u)" = 0 ] || { echo "image-check: run as root" >&2; exit 2; }
command -v buildah >/dev/null || { echo "image-check: needs buildah (apt-get install buildah)" >&2; exit 2; }
want_go=go$(awk '$1 == "go" {print $2; exit}' go.mod)
[ "$(go env GOVERSION)" = "$want_go" ] || { echo "image-check: the build stand-in needs $want_go here, not $(go env GOVERSION)" >&2; exit 2; }
mapfile -t froms < <(awk '$1 == "FROM" {print $2}' Dockerfile)
[ "${#froms[@]}" = 2 ] || { echo "image-check: expected two stages in the Dockerfile, got: ${froms[*]}" >&2; exit 1; }

work=$(mktemp -d /tmp/image-check.XXXXXX)
# vfs: no mounts to undo; the store is deleted with $work.
cat >"$work/storage.conf" <<CONF
[storage]
driver = "vfs"
graphroot = "$work/graph"
runroot = "$work/run"
CONF
export CONTAINERS_STORAGE_CONF=$work/storage.conf
# crun refuses a hybrid cgroup hierarchy; chroot isolation needs no runtime.
export BUILDAH_ISOLATION=chroot
server=''
cleanup() {
  local code=$?
  [ -z "$server" ] || kill "$server" 2>/dev/null || true
  buildah rm --all >/dev/null 2>&1 || true
  buildah rmi --all --force >/dev/null 2>&1 || true
  rm -rf "$work"
  [ "$code" = 0 ] || echo "image-check FAILED" >&2
}
trap cleanup EXIT

# libs FILE: the shared libraries FILE loads (the dynamic loader included).
libs() {
  ldd "$1" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}'
}
# copy_into ROOT FILE...: each FILE at its own path under ROOT.
copy_into() {
  local root=$1 f
  shift
  for f in "$@"; do
    mkdir -p "$root$(dirname "$f")"
    cp -L "$f" "$root$f"
  done
}
path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The build stage: Go at /usr/local/go, a POSIX shell for RUN, CA roots for
# the module downloads.
ctr=$(buildah from scratch)
root=$(buildah mount "$ctr")
# shellcheck disable=SC2046
copy_into "$root" /bin/sh $(libs /bin/sh)
mkdir -p "$root/usr/local"
cp -a "$(go env GOROOT)" "$root/usr/local/go"
mkdir -p "$root/etc/ssl/certs" "$root/root" "$root/tmp"
chmod 1777 "$root/tmp"
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
buildah config --env PATH=/usr/local/go/bin:/go/bin:$path --env GOPATH=/go --env HOME=/root "$ctr"
buildah commit -q "$ctr" "${froms[0]}" >/dev/null
buildah rm "$ctr" >/dev/null
# The run stage: glibc (what the daemon loads), no shell, distroless's PATH
# and users.
ctr=$(buildah from scratch)
root=$(buildah mount "$ctr")
[ -x bin/dataloaderd ] || { echo "image-check: make build first: the run stand-in takes bin/dataloaderd's libraries" >&2; exit 2; }
# shellcheck disable=SC2046
copy_into "$root" $(libs bin/dataloaderd)
mkdir -p "$root/tmp" "$root/etc"
chmod 1777 "$root/tmp"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
buildah config --env PATH=$path --user 65532:65532 "$ctr"
buildah commit -q "$ctr" "${froms[1]}" >/dev/null
buildah rm "$ctr" >/dev/null

image=dataloaderd:image-check
make --no-print-directory image CONTAINER_TOOL=buildah IMAGE=$image >"$work/build.log" 2>&1 ||
  { tail -n 30 "$work/build.log" >&2; exit 1; }
version=$(git describe --tags --always --dirty)

# The image's user is the pod's; its entry point is the daemon.
uid=$(awk '$1 == "runAsUser:" {print $2; exit}' deploy/kubernetes-sidecar.yaml)
gid=$(awk '$1 == "runAsGroup:" {print $2; exit}' deploy/kubernetes-sidecar.yaml)
user=$(buildah inspect --format '{{.OCIv1.Config.User}}' "$image")
[ "$user" = "$uid:$gid" ] || { echo "image-check: the image runs as '$user', the pod as $uid:$gid" >&2; exit 1; }
entry=$(buildah inspect --format '{{index .OCIv1.Config.Entrypoint 0}}' "$image")
[ "$(basename "$entry")" = dataloaderd ] || { echo "image-check: entry point $entry" >&2; exit 1; }
ctr=$(buildah from "$image")
got=$(buildah run "$ctr" -- "$entry" version)
[ "$got" = "dataloaderd $version" ] || { echo "image-check: the image's daemon says '$got', not 'dataloaderd $version'" >&2; exit 1; }

# The daemon serves in it, as that user, and leaves nothing on SIGTERM.
root=$(buildah mount "$ctr")
buildah run "$ctr" -- "$entry" serve --socket /tmp/image-check.sock --shm-dir /tmp --log-level warn 2>"$work/serve.log" &
server=$!
pid=''
for _ in $(seq 100); do
  pid=$(pgrep -f -- "^$entry serve --socket /tmp/image-check.sock" || true)
  [ -n "$pid" ] && buildah run "$ctr" -- dataloaderd healthcheck --socket /tmp/image-check.sock --timeout 2s >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { cat "$work/serve.log" >&2; echo "image-check: the daemon did not start in the image" >&2; exit 1; }
  sleep 0.1
done
buildah run "$ctr" -- dataloaderd healthcheck --socket /tmp/image-check.sock --timeout 2s
owner=$(ps -o uid=,gid= -p "$pid" | awk '{print $1 ":" $2}')
[ "$owner" = "$uid:$gid" ] || { echo "image-check: the daemon runs as $owner, not $uid:$gid" >&2; exit 1; }
sock=$(stat -c '%u:%g %a' "$root/tmp/image-check.sock")
[ "$sock" = "$uid:$gid 660" ] || { echo "image-check: the socket is $sock, not $uid:$gid 660" >&2; exit 1; }
kill -TERM "$pid"
code=0
wait "$server" || code=$?
server=''
[ "$code" = 0 ] || { cat "$work/serve.log" >&2; echo "image-check: the daemon exited $code on SIGTERM" >&2; exit 1; }
left=$(ls -A "$root/tmp")
[ -z "$left" ] || { echo "image-check: left in the image's /tmp: $left" >&2; exit 1; }
echo "image-check: $image runs as $user, says '$got', serves with its socket $sock, and leaves nothing after SIGTERM"
echo "image-check: OK (base images were stand-ins: ${froms[*]})"
