#!/usr/bin/env bash
# Build Jaeger v2 (module tag v1.76.0 = Jaeger v2.13.0) from the Go module
# proxy into $1, once per machine. `go install pkg@version` refuses modules
# whose go.mod has replace directives, so build from the module's source.
set -euo pipefail
out=$1
version=v1.76.0
if ! command -v go >/dev/null 2>&1; then
  echo "error: the tracing test needs Go to build Jaeger $version; install Go (https://go.dev/dl/) and run make test again" >&2
  exit 1
fi
dir=$(go mod download -json "github.com/jaegertracing/jaeger@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$dir/." "$work/src"
chmod -R u+w "$work/src"
mkdir -p "$(dirname "$out")"
started=$(date +%s)
(cd "$work/src" && go build -o "$out.tmp" ./cmd/jaeger)
mv "$out.tmp" "$out"
echo "built Jaeger $version into $out in $(( $(date +%s) - started ))s"
