#!/bin/sh
# Regenerates lib/sessiond_store/gen/ from api/proto (or writes the two files
# to the folder given as $1, to compare). Run from anywhere; the committed
# files must come out unchanged (make proto-check and test/test_gen.rb check).
#
# grpc_tools_ruby_protoc (Debian package ruby-grpc-tools) runs Debian's
# protoc (3.21.12, package protobuf-compiler) with gRPC's Ruby plugin: the
# messages come out in the DescriptorPool DSL that every google-protobuf
# runtime from 3.x on loads, the service in the form ruby-grpc 1.51 expects.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
proto=$(cd "$here/../../api/proto" && pwd)
out=${1:-"$here/lib/sessiond_store/gen"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

grpc_tools_ruby_protoc -I"$proto" --ruby_out="$tmp" --grpc_out="$tmp" "$proto/sessiond/v1/sessiond.proto"

# The service file requires the messages by their path under the proto
# root ("sessiond/v1/sessiond_pb"), which is on no load path here: inside
# the gem they are a sibling file.
sed -e "s|^require 'sessiond/v1/sessiond_pb'\$|require_relative 'sessiond_pb'|" \
    "$tmp/sessiond/v1/sessiond_services_pb.rb" >"$tmp/services.rb"
if grep -q "^require 'sessiond" "$tmp/services.rb"; then
  echo "gen.sh: a require of sessiond/v1 was left in sessiond_services_pb.rb" >&2
  exit 1
fi

mkdir -p "$out"
cp "$tmp/sessiond/v1/sessiond_pb.rb" "$out/sessiond_pb.rb"
cp "$tmp/services.rb" "$out/sessiond_services_pb.rb"
