# SPDX-License-Identifier: Apache-2.0
"""The `multihead` Python package, built by CMake: the C++ library and its pybind11 module
(python/) are configured in build-python/cmake, the module is built there, and it lands in the
package beside python/multihead's files. The version is CMakeLists.txt's project() version.

`pip install .` builds it in an isolated environment (PEP 517) with the requirements of
pyproject.toml, pybind11 among them; `pip install --no-build-isolation .` with what the interpreter
has (Debian's setuptools, wheel and pybind11-dev).

Settings from the environment: CMAKE_BUILD_PARALLEL_LEVEL (jobs; default the CPU count) and
MULTIHEAD_CMAKE_ARGS (more -D options, e.g. -DMULTIHEAD_NATIVE=ON for kernels built for this CPU
alone instead of the portable build)."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
# setuptools' build and egg-info folders, kept out of the source tree's top; egg_info refuses a
# folder that does not exist yet, as on a clean checkout.
BUILD_BASE = ROOT / "build-python"
BUILD_BASE.mkdir(exist_ok=True)


def project_version():
    match = re.search(r"project\(multihead VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    if not match:
        raise RuntimeError("CMakeLists.txt has no 'project(multihead VERSION x.y.z' line")
    return match.group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = Path(self.build_temp).resolve() / "cmake"
        target = Path(self.get_ext_fullpath(ext.name)).resolve()
        configure = ["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                     "-DMULTIHEAD_BUILD_TESTS=OFF", "-DMULTIHEAD_PYTHON=ON", f"-DPython3_EXECUTABLE={sys.executable}"]
        try:  # pybind11 from PyPI where the build has it (pip's isolated build), else CMake finds Debian's
            import pybind11
            configure.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
        except ImportError:
            pass
        configure += shlex.split(os.environ.get("MULTIHEAD_CMAKE_ARGS", ""))
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "_multihead", "-j", jobs], check=True)
        built = list((build_dir / "python" / "multihead").glob("_multihead*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one _multihead module in {build_dir}/python/multihead, found {built}")
        target.parent.mkdir(parents=True, exist_ok=True)
        self.copy_file(str(built[0]), str(target))


setup(
    version=project_version(),
    packages=["multihead"],
    package_dir={"multihead": "python/multihead"},
    ext_modules=[Extension("multihead._multihead", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": str(BUILD_BASE)}, "egg_info": {"egg_base": str(BUILD_BASE)}},
    zip_safe=False,
)
