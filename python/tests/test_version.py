"""One version: CMake's project version = `turbokv --version` = turbokv.__version__."""
import os

import turbokv
from conftest import run_tool


def test_versions_agree():
    cli = run_tool("--version").strip()
    assert cli == f"turbokv {turbokv.__version__}"
    assert turbokv.__version__ == os.environ["TURBOKV_CMAKE_VERSION"]
