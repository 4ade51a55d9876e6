#!/bin/sh
# Regenerates src/gen from ../../api/proto with ts-proto (pinned in
# package.json) and Debian's protoc 3.21.12, the protoc the Go code is
# generated with. The output is committed; CI checks that this makes no diff.
set -eu
cd "$(dirname "$0")/.."
want="libprotoc 3.21.12"
got="$(protoc --version)"
if [ "$got" != "$want" ]; then
  echo "gen: need $want (apt-get install protobuf-compiler on Debian 12), found: $got" >&2
  exit 1
fi
rm -rf src/gen
mkdir -p src/gen
protoc \
  --plugin=protoc-gen-ts_proto=./node_modules/.bin/protoc-gen-ts_proto \
  --ts_proto_out=src/gen \
  --ts_proto_opt=outputServices=grpc-js,env=node,esModuleInterop=true,importSuffix=.js,useOptionals=none,outputJsonMethods=false,outputPartialMethods=true \
  -I ../../api/proto \
  ../../api/proto/sessiond/v1/sessiond.proto
