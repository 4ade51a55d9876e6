#!/bin/sh
# Regenerates sessiond_store/gen/ from api/proto (or writes the two files to
# the folder given as $1, to compare). Run from anywhere; the committed files
# must come out unchanged (tests/test_gen.py checks).
#
# Message code: Debian's protoc (3.21.12, package protobuf-compiler), whose
# output works with every protobuf runtime from 3.20 on, upb included.
# Service stubs: python3 -m grpc_tools.protoc (package python3-grpc-tools).
# grpc_tools' own message output is not used: Debian's 1.14.1 embeds
# libprotoc 3.5.1, whose code builds descriptors directly, which the upb
# runtime of a pip-installed protobuf >= 4.21 refuses.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
proto=$(cd "$here/../../api/proto" && pwd)
py=${PYTHON:-/usr/bin/python3}
out=${1:-"$here/sessiond_store/gen"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

protoc -I"$proto" --python_out="$tmp" "$proto/sessiond/v1/sessiond.proto"
"$py" -m grpc_tools.protoc -I"$proto" --grpc_python_out="$tmp" "$proto/sessiond/v1/sessiond.proto"

# The generated stubs import the messages as the top-level package
# "sessiond.v1"; inside sessiond_store they are a sibling module.
sed -e 's/^from sessiond\.v1 import sessiond_pb2 as /from . import sessiond_pb2 as /' \
    "$tmp/sessiond/v1/sessiond_pb2_grpc.py" >"$tmp/grpc.py"
if grep -q '^from sessiond' "$tmp/grpc.py"; then
  echo "gen.sh: an import of sessiond.v1 was left in sessiond_pb2_grpc.py" >&2
  exit 1
fi

cp "$tmp/sessiond/v1/sessiond_pb2.py" "$out/sessiond_pb2.py"
cp "$tmp/grpc.py" "$out/sessiond_pb2_grpc.py"
