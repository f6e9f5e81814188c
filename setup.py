"""Builds nanovllm._C with the project's CMake build (target nanovllm_python) for the running
interpreter, then lets setuptools install it with python/nanovllm.

Build folder: build/pip-<python version> (configured here, kept between installs; ccache makes
rebuilds fast). Or $NANOVLLM_BUILD_DIR: an existing CMake build tree of this repo (e.g.
build/release), whose nanovllm_python target is built as it is configured (not reconfigured).
Extra CMake arguments for the first case: $CMAKE_ARGS (e.g. "-DNANOVLLM_CUDA=OFF").
"""
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        given = os.environ.get("NANOVLLM_BUILD_DIR")
        build_dir = Path(given).resolve() if given else ROOT / "build" / f"pip-{version}"
        if given and not (build_dir / "CMakeCache.txt").exists():
            raise RuntimeError(f"NANOVLLM_BUILD_DIR={given} is not a configured CMake build tree")
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
            "-DCMAKE_BUILD_TYPE=Release", "-DNANOVLLM_PYTHON=ON", "-DNANOVLLM_TESTS=OFF",
            "-DNANOVLLM_BENCH=OFF", f"-DPython_EXECUTABLE={sys.executable}",
            *shlex.split(os.environ.get("CMAKE_ARGS", "")),
        ]
        steps = [] if given else [configure]
        for cmd in (*steps, ["cmake", "--build", str(build_dir), "--target", "nanovllm_python",
                                "-j", str(os.cpu_count() or 1)]):
            print(" ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
        built = sorted((build_dir / "python" / "nanovllm").glob("_C.*.so"))
        if not built:
            raise RuntimeError(f"the CMake build made no nanovllm/_C.*.so in {build_dir}/python")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[-1], target)


# setuptools' egg-info goes under build/, not into python/ beside the sources.
(ROOT / "build").mkdir(exist_ok=True)
setup(ext_modules=[CMakeExtension("nanovllm._C")], cmdclass={"build_ext": CMakeBuild},
      options={"egg_info": {"egg_base": os.path.relpath(ROOT / "build")}})
