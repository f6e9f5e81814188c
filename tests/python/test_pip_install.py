"""`pip install --no-build-isolation .` into a fresh venv (Debian's python, its site packages
visible, no index: offline) installs a working package. Here the extension comes from the build
tree CTest runs in (NANOVLLM_BUILD_DIR: built as configured, nothing recompiled);
test_pip_install_heavy.py builds it from scratch as a user's `pip install .` does (minutes)."""
import os

from conftest import pip_install_and_run


def test_pip_install_from_the_build_tree(tmp_path, tiny_model):
    seconds = pip_install_and_run(tmp_path, tiny_model,
                                  NANOVLLM_BUILD_DIR=os.environ["NANOVLLM_BINARY_DIR"])
    print(f"pip install took {seconds:.1f} s")
