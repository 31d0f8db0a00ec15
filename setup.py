"""The Python package's build step: setuptools calls this to make `turbokv._core`, which is the
CMake target `turbokv_python` (python/CMakeLists.txt) built from this checkout with the
interpreter that runs the build, then copies it and the default model (models/README.md) into
the package. Metadata is in pyproject.toml.

Environment: CMAKE (the cmake to run), CMAKE_BUILD_PARALLEL_LEVEL (jobs; default: all cores),
TURBOKV_WHEEL_BUILD_DIR (the CMake build folder; default build-wheel/ in the checkout, kept so a
second `pip install .` rebuilds only what changed). ccache is used when installed.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
# What Model.default() needs beside _core (engine/model/model_files.hpp), and its provenance.
SHIPPED_MODEL_FILES = ("kjv-llama-3M.bin", "tok512.bin", "README.md")


def project_version():
    match = re.search(r"project\(turbokv VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    if not match:
        raise RuntimeError("no project(turbokv VERSION ...) in CMakeLists.txt")
    return match.group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        cmake = os.environ.get("CMAKE") or shutil.which("cmake")
        if not cmake:
            raise RuntimeError("cmake not found (Debian: apt-get install cmake; or run scripts/setup.sh)")
        build = Path(os.environ.get("TURBOKV_WHEEL_BUILD_DIR") or ROOT / "build-wheel").resolve()
        configure = [cmake, "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                     f"-DPython_EXECUTABLE={sys.executable}", "-DTURBOKV_BUILD_PYTHON=ON",
                     "-DTURBOKV_BUILD_TESTS=OFF", "-DTURBOKV_BUILD_BENCH=OFF", "-DTURBOKV_BUILD_TOOLS=OFF"]
        if not (build / "CMakeCache.txt").exists() and shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        if shutil.which("ccache"):
            configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
        subprocess.run(configure, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.run([cmake, "--build", str(build), "--target", "turbokv_python", "-j", jobs], check=True)

        built = sorted((build / "python" / "turbokv").glob("_core*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one built _core module in {build / 'python' / 'turbokv'}, found {built}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built[0], target)
        models = target.parent / "models"
        models.mkdir(exist_ok=True)
        for name in SHIPPED_MODEL_FILES:
            shutil.copy2(ROOT / "models" / name, models / name)


setup(
    version=project_version(),
    ext_modules=[Extension("turbokv._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # setuptools' own scratch folders, away from the CMake build in build/.
    options={"build": {"build_base": str(Path("build-wheel") / "setuptools")}},
)
