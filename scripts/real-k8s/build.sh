#!/usr/bin/env bash
# Build the real control plane's binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) from
# the Go module proxy at the versions pinned by the go.mod files beside this script, into a cache outside the checkout:
#   ${PLATFORMCTL_REAL_K8S_CACHE:-~/.cache/platformctl/real-k8s}/<pins>/bin
# <pins> is a hash of this folder's files and the Go version: a build is made once per machine and pin, and again only
# when a pin changes. The modules and Go's build cache live in the same cache (a cold build downloads and compiles
# everything; a warm one is a check). Prints the bin folder on its last line.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${PLATFORMCTL_REAL_K8S_CACHE:-$HOME/.cache/platformctl/real-k8s}"
command -v go > /dev/null || { echo "build.sh: the Go toolchain (go) is not on PATH" >&2; exit 2; }
pins="$( (cd "$here" && cat build.sh */go.mod */go.sum */*.go; go version) | sha256sum | cut -c1-16)"
bin="$root/$pins/bin"
wanted=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
missing=()
for b in "${wanted[@]}"; do [ -x "$bin/$b" ] || missing+=("$b"); done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$bin"
export GOMODCACHE="$root/mod" GOCACHE="$root/go-build" GOFLAGS="-mod=mod -trimpath" CGO_ENABLED=0
k8s_version="$(sed -n 's/^require k8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' "$here/kubernetes/go.mod")"
minor="$(echo "$k8s_version" | cut -d. -f2)"
version="k8s.io/component-base/version"
k8s_flags="-s -w -X $version.gitVersion=$k8s_version -X $version.gitMajor=1 -X $version.gitMinor=$minor \
  -X $version.gitTreeState=clean -X $version.buildDate=1970-01-01T00:00:00Z"
start=$SECONDS
for b in "${missing[@]}"; do
  case "$b" in
    etcd) (cd "$here/etcd" && go build -ldflags "-s -w" -o "$bin/etcd.tmp" .) ;;
    kwok) (cd "$here/kwok" && go build -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=v0.7.0" \
             -o "$bin/kwok.tmp" sigs.k8s.io/kwok/cmd/kwok) ;;
    *) (cd "$here/kubernetes" && go build -ldflags "$k8s_flags" -o "$bin/$b.tmp" "k8s.io/kubernetes/cmd/$b") ;;
  esac
  mv "$bin/$b.tmp" "$bin/$b"
  echo "built $b in $((SECONDS - start)) s" >&2
done
echo "built ${missing[*]} in $((SECONDS - start)) s; $(du -sh "$bin" | cut -f1) of binaries, $(du -sh "$root" | cut -f1) with the module and build caches" >&2
echo "$bin"
