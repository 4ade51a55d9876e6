"""The committed generated code is what gen.sh makes from api/proto."""

import filecmp
import os
import shutil
import subprocess

import pytest

from conftest import SDK, short_tmp


@pytest.mark.skipif(shutil.which("protoc") is None, reason="protoc (Debian protobuf-compiler) is not installed")
def test_gen_sh_makes_no_diff():
    out = short_tmp("sdpy-gen-")
    try:
        subprocess.run([str(SDK / "gen.sh"), out], check=True)
        for name in ("sessiond_pb2.py", "sessiond_pb2_grpc.py"):
            committed = SDK / "sessiond_store" / "gen" / name
            assert filecmp.cmp(os.path.join(out, name), str(committed), shallow=False), (
                "%s is not what gen.sh makes from api/proto: run sdk/python/gen.sh" % name
            )
    finally:
        shutil.rmtree(out, ignore_errors=True)
