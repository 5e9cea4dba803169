#!/usr/bin/env bash
# Regenerates the Go code for proto/. Needs protoc (Debian: protobuf-compiler)
# and installs the three plugins at the versions go.mod uses. vtprotobuf's
# code (lock_vtproto.pb.go) encodes and decodes the Session's messages on
# the WebSocket without reflection.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v protoc >/dev/null; then
  echo "installing protobuf-compiler" >&2
  apt-get update -qq && apt-get install -y -qq protobuf-compiler >&2
fi
gobin="$(go env GOPATH)/bin"
go install google.golang.org/protobuf/cmd/protoc-gen-go@"$(go list -m -f '{{.Version}}' google.golang.org/protobuf)"
go install connectrpc.com/connect/cmd/protoc-gen-connect-go@"$(go list -m -f '{{.Version}}' connectrpc.com/connect)"
go install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@"$(go list -m -f '{{.Version}}' github.com/planetscale/vtprotobuf)"
PATH="$gobin:$PATH" protoc -I proto \
  --go_out=. --go_opt=module=github.com/fencelock/fencelock \
  --connect-go_out=. --connect-go_opt=module=github.com/fencelock/fencelock \
  --go-vtproto_out=. --go-vtproto_opt=module=github.com/fencelock/fencelock,features=marshal+unmarshal+size \
  proto/fencelock/v1/lock.proto
echo "generated proto/fencelock/v1" >&2
