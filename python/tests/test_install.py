"""The documented offline install (`cmake --install build --component python`), into a scratch
prefix: the installed package imports and works without the build tree."""
import os
import subprocess
import sys


def test_python_component_installs_and_imports(tmp_path):
    subprocess.run([os.environ["TURBOKV_CMAKE"], "--install", os.environ["TURBOKV_BUILD_DIR"], "--component", "python",
                    "--prefix", str(tmp_path)], check=True, capture_output=True)
    site = tmp_path / os.environ["TURBOKV_PYTHON_INSTALL_DIR"]
    assert (site / "turbokv" / "__init__.pyi").exists() and (site / "turbokv" / "py.typed").exists()
    code = ("import numpy as np, turbokv; c = turbokv.TurboQuantKVCache(bits=4); "
            "c.update_and_fetch(np.ones((1, 2, 3, 64), np.float32), np.ones((1, 2, 3, 64), np.float32)); "
            "print(turbokv.__file__, c.offset)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env,
                         cwd=tmp_path).stdout.split()
    assert out[0].startswith(str(site)) and out[1] == "3"
