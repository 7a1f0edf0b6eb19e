#!/usr/bin/env bash
# Regenerates squawkv1/policy.pb.go and squawkv1/policy_grpc.pb.go from
# protos/squawk/v1/policy.proto.
#
#   clients/go/gen.sh           regenerate in place
#   clients/go/gen.sh --check   regenerate into a temporary folder and fail
#                               (exit 1, with a diff) if the committed code differs
#
# protoc comes from grpcio-tools in the repo's .venv (`make setup`); set PYTHON
# to use another interpreter that has grpcio-tools. The two Go plugins are
# installed by this script at the pinned versions below into a cache folder
# outside the repo (SQUAWK_GO_TOOLS, default ~/.cache/squawk/go-tools).
set -euo pipefail

PROTOC_GEN_GO_VERSION=v1.36.12      # google.golang.org/protobuf/cmd/protoc-gen-go
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2   # google.golang.org/grpc/cmd/protoc-gen-go-grpc
MODULE=github.com/squawk-dev/squawk/clients/go

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

check=false
case "${1:-}" in
  "") ;;
  --check) check=true ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

python="${PYTHON:-$root/.venv/bin/python}"
if ! "$python" -c 'import grpc_tools.protoc' 2>/dev/null; then
  echo "gen.sh: $python cannot import grpc_tools; run 'make setup' at the repo root first (or set PYTHON)" >&2
  exit 1
fi
wkt="$("$python" -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')"

cache="${SQUAWK_GO_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/squawk/go-tools}"
bin="$cache/protoc-gen-go-$PROTOC_GEN_GO_VERSION-grpc-$PROTOC_GEN_GO_GRPC_VERSION"
if [[ ! -x "$bin/protoc-gen-go" || ! -x "$bin/protoc-gen-go-grpc" ]]; then
  mkdir -p "$bin"
  # Run outside any module so the repo's go.mod plays no part.
  (cd "$cache" &&
    GOBIN="$bin" GOFLAGS=-buildvcs=false go install \
      "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION" &&
    GOBIN="$bin" GOFLAGS=-buildvcs=false go install \
      "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION")
fi

out="$here"
if $check; then
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
fi

# The proto is named relative to its include root so the generated
# "source:" comment does not depend on where the repo is checked out.
(cd "$root/protos" && "$python" -m grpc_tools.protoc \
  -I. -I"$wkt" \
  --plugin=protoc-gen-go="$bin/protoc-gen-go" \
  --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
  --go_out="$out" --go_opt=module="$MODULE" \
  --go-grpc_out="$out" --go-grpc_opt=module="$MODULE" \
  squawk/v1/policy.proto)

if $check; then
  status=0
  for f in policy.pb.go policy_grpc.pb.go; do
    if ! diff -u "$here/squawkv1/$f" "$out/squawkv1/$f"; then
      status=1
    fi
  done
  if [[ $status -ne 0 ]]; then
    echo "gen.sh --check: clients/go/squawkv1 is stale; run clients/go/gen.sh" >&2
  fi
  exit $status
fi
