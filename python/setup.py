"""Build glue: setuptools-rust compiles the kernel crate as a plain shared library
(``Binding.NoBinding``) and puts it into the package as ``t2po/_t2po_control*.so``."""

import os

from setuptools import setup
from setuptools_rust import Binding, RustExtension

HERE = os.path.dirname(os.path.abspath(__file__))

setup(
    rust_extensions=[
        RustExtension(
            "t2po._t2po_control",
            path=os.path.join(HERE, "..", "t2po-control", "Cargo.toml"),
            binding=Binding.NoBinding,
            cargo_manifest_args=["--locked"],
            features=[],
            debug=False,
        )
    ],
    zip_safe=False,
)
