"""`pip install --no-build-isolation .` as a user runs it: CMake configures build/pip-3.X and
compiles the engine (several minutes on 2 cores without ccache hits; CTest label heavy)."""
from conftest import pip_install_and_run


def test_pip_install_builds_from_scratch(tmp_path, tiny_model):
    seconds = pip_install_and_run(tmp_path, tiny_model, CMAKE_ARGS="-DNANOVLLM_CUDA=OFF")
    print(f"pip install took {seconds:.1f} s")
