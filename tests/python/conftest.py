# tests/python: the kvphase Python module. Run by ctest (python.* tests, python/CMakeLists.txt)
# with PYTHONPATH=<build>/python and the interpreter the module was built for; the import below is
# deliberately not guarded: a missing module fails the suite.
import os
import shutil
import subprocess

import kvphase  # noqa: F401
import pytest


@pytest.fixture(scope="session")
def sweep_cli():
    """Path of the kvphase-sweep program of the same build (KVPHASE_SWEEP_CLI)."""
    path = os.environ.get("KVPHASE_SWEEP_CLI", "")
    if not path:
        pytest.skip("KVPHASE_SWEEP_CLI not set: examples not built (KVPHASE_BUILD_EXAMPLES=OFF)")
    assert os.access(path, os.X_OK), f"KVPHASE_SWEEP_CLI={path} is not an executable"
    return path


@pytest.fixture(scope="session")
def compress_reference(tmp_path_factory):
    """Directory of C++ compress results written by kvphase_tests_compress's hidden
    [python_reference] case (KVPHASE_COMPRESS_REF = that binary)."""
    exe = os.environ.get("KVPHASE_COMPRESS_REF", "")
    if not exe:
        pytest.skip("KVPHASE_COMPRESS_REF not set: tests not built")
    d = tmp_path_factory.mktemp("compress_ref")
    env = dict(os.environ, KVPHASE_COMPRESS_REF_DIR=str(d))
    subprocess.run([exe, "[python_reference]"], check=True, env=env, stdout=subprocess.DEVNULL)
    yield d
    shutil.rmtree(d, ignore_errors=True)
