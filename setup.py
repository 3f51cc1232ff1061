"""Builds and installs the causeway Python package.

    pip install --no-build-isolation .

The extension module is built by CMake (the release preset's build tree,
build/release, or CAUSEWAY_BUILD_DIR), with Debian's pybind11 and the
system's Python; nothing is downloaded.
"""
import os
import pathlib
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).parent.resolve()


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = pathlib.Path(os.environ.get("CAUSEWAY_BUILD_DIR", ROOT / "build" / "release"))
        if not (build_dir / "build.ninja").exists():
            if build_dir == ROOT / "build" / "release":
                subprocess.check_call(["cmake", "--preset", "release"], cwd=ROOT)
            else:
                subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
                                       "-DCMAKE_BUILD_TYPE=RelWithDebInfo"])
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "causeway_python"])
        built = sorted((build_dir / "python" / "causeway").glob("_causeway*.so"))
        if not built:
            raise RuntimeError(f"no extension module under {build_dir}/python/causeway")
        dest = pathlib.Path(self.get_ext_fullpath(ext.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[-1], dest)


setup(
    name="causeway",
    version="0.9.0",
    description="A single-controller runtime for ML accelerators (Pathways-style), from Python",
    packages=["causeway"],
    package_dir={"": "python"},
    package_data={"causeway": ["*.pyi", "py.typed"]},
    ext_modules=[Extension("causeway._causeway", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    install_requires=["numpy"],
)
