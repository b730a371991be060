"""Builds libroute's uniffi library with cargo and ships it inside the `libroute` package.

`pip install ./bindings/python` runs this from the repository: the generated module
`libroute/_libroute.py` is committed (`cargo xtask codegen` writes it), and the library it loads,
`libroute_uniffi.so`, is built here from the Rust sources next to it.
"""

import os
import pathlib
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = pathlib.Path(__file__).resolve().parent


def workspace_root() -> pathlib.Path:
    """The libroute repository this package is built from."""
    for candidate in [HERE, *HERE.parents]:
        if (candidate / "ffi" / "uniffi" / "Cargo.toml").is_file():
            return candidate
    sys.exit(
        "libroute: cannot find the Rust sources (ffi/uniffi/Cargo.toml) above "
        f"{HERE}; build from a checkout of the repository"
    )


def library_name() -> str:
    if sys.platform == "darwin":
        return "libroute_uniffi.dylib"
    if sys.platform.startswith("win"):
        return "route_uniffi.dll"
    return "libroute_uniffi.so"


class BuildWithCargo(build_py):
    """Runs `cargo build --release -p libroute-uniffi` and copies the library into the package."""

    def run(self):
        super().run()
        root = workspace_root()
        cargo = os.environ.get("CARGO", "cargo")
        subprocess.run(
            [cargo, "build", "--release", "-p", "libroute-uniffi"], cwd=root, check=True
        )
        target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", root / "target"))
        built = target / "release" / library_name()
        destination = pathlib.Path(self.build_lib) / "libroute" / library_name()
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, destination)


class BinaryDistribution(Distribution):
    """The wheel carries a native library: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithCargo}, distclass=BinaryDistribution)
