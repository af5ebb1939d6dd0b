"""`pip install .` for the Python module `kvtier` (pyproject.toml).

The module is built by kvtier's own CMake, exactly as `scripts/build kvtier_python` builds it,
but in a build tree of its own (build-pip/, never build/), configured without tests or
benchmarks, and only the module's target (and the static libraries it links) is built. The
interpreter is the one running pip. The wheel holds the extension module and its type stub
kvtier.pyi, side by side.
Environment: CMAKE_BUILD_PARALLEL_LEVEL (default: every core), CMAKE_BUILD_TYPE (default Release).
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


def project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"project\(kvtier VERSION ([0-9][0-9.]*)", text)
    if not m:
        raise RuntimeError("CMakeLists.txt: no `project(kvtier VERSION x.y.z ...)`")
    return m.group(1)


class CMakeBuild(build_ext):
    """Builds the one extension, kvtier, with CMake."""

    def build_extension(self, ext):
        build_dir = Path(self.build_temp).resolve() / "cmake"
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DCMAKE_BUILD_TYPE={os.environ.get('CMAKE_BUILD_TYPE') or 'Release'}",
            "-DKVTIER_BUILD_TESTS=OFF", "-DKVTIER_BUILD_MICRO_BENCH=OFF",
        ]
        out = subprocess.run(configure, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print(out.stdout)
        if out.returncode != 0:
            raise RuntimeError(f"kvtier: CMake configure failed (rc {out.returncode}); see above")
        if "Python module SKIPPED" in out.stdout:
            raise RuntimeError("kvtier: CMake cannot build the Python module here (it needs "
                               "python3-dev and pybind11-dev: scripts/setup)")
        build = ["cmake", "--build", str(build_dir), "--target", "kvtier_python"]
        if not os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL"):
            build += ["--parallel", str(os.cpu_count() or 1)]
        subprocess.run(build, check=True)

        built = sorted((build_dir / "python").glob("kvtier*.so"))
        if len(built) != 1:
            raise RuntimeError(f"kvtier: expected one module in {build_dir / 'python'}, found {built}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], target)
        shutil.copyfile(ROOT / "python" / "kvtier.pyi", target.parent / "kvtier.pyi")


setup(
    version=project_version(),
    ext_modules=[Extension("kvtier", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # Out of build/, the CMake build directory of scripts/build.
    options={"build": {"build_base": "build-pip"}},
    zip_safe=False,
)
