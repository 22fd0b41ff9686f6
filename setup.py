"""pip install --no-build-isolation .   (from the repository root, in a venv made with --system-site-packages)

Installs the `memplan` Python module (python/memplan, with memplan._core built from python/bindings.cc and
keywords.cc) and the `memplan` command, the same C++ binary scripts/build.sh builds. Both are built by CMake in build/ (or
$MEMPLAN_BUILD_DIR), the folder the README's build uses, so a tree already built is only linked, not rebuilt.
Nothing is fetched: the build needs only the Debian packages of scripts/setup.sh (pybind11-dev, python3-dev)
and the setuptools Debian ships.
"""
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD_DIR = os.path.abspath(os.environ.get("MEMPLAN_BUILD_DIR", os.path.join(ROOT, "build")))


def project_version() -> str:
    """The version CMakeLists.txt declares: the one the CLI and memplan._core print."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(memplan\s+VERSION\s+([0-9.]+)", f.read())
    if not m:
        raise SystemExit("setup.py: no `project(memplan VERSION x.y.z)` in CMakeLists.txt")
    return m.group(1)


class CMakeBuild(build_ext):
    """Builds the CLI and the module with CMake, then copies the module where setuptools packs it."""

    def build_extension(self, ext):
        if not os.path.exists(os.path.join(BUILD_DIR, "CMakeCache.txt")):
            # A fresh build folder: the interpreter pip runs is the one the module is for.
            subprocess.check_call(["cmake", "-S", ROOT, "-B", BUILD_DIR, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                                   f"-DPython3_EXECUTABLE={sys.executable}"])
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", BUILD_DIR, "-j", jobs, "--target", "memplan",
                               "memplan_python_core"])
        built = os.path.join(BUILD_DIR, "python", "memplan")
        cores = [f for f in os.listdir(built) if f.startswith("_core.") and f.endswith(".so")] if os.path.isdir(built) else []
        if len(cores) != 1:
            raise SystemExit(f"setup.py: {built} holds no _core module: is MEMPLAN_PYTHON on and pybind11-dev "
                             "installed (scripts/setup.sh)? See the cmake output above.")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(built, cores[0]), target)


setup(
    name="memplan",
    version=project_version(),
    description="How much GPU memory an ONNX model or a PyTorch module needs, before you launch anything",
    python_requires=">=3.9",
    package_dir={"": "python"},
    packages=["memplan"],
    ext_modules=[Extension("memplan._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # The `memplan` command: the C++ binary itself, installed into the environment's bin/.
    data_files=[("bin", [os.path.relpath(os.path.join(BUILD_DIR, "memplan"), ROOT)])],
    options={"build": {"build_base": os.path.relpath(os.path.join(BUILD_DIR, "setuptools"), ROOT)}},
    zip_safe=False,
)
